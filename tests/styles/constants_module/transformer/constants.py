"""Every size of the model, in one place (the base model of Table 3)."""
D_MODEL = 512
N_HEADS = 8
D_FF = 2048
N_LAYERS = 6
DROPOUT = 0.1
SRC_VOCAB_SIZE = 1000
TGT_VOCAB_SIZE = 1000
MAX_SEQ_LEN = 256
PAD_ID = 0
