PAD = 0
BOS = 1
EOS = 2
