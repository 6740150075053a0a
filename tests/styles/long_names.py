"""An encoder-decoder Transformer with descriptive names: every size is spelled out, the blocks are built once and
deep-copied into the stacks."""
import copy
import math

import torch
import torch.nn as nn


class Transformer(nn.Module):
    def __init__(self, model_dimension, src_vocab_size, trg_vocab_size, number_of_heads, number_of_layers,
                 dropout_probability):
        super().__init__()
        self.src_embedding = Embedding(src_vocab_size, model_dimension)
        self.trg_embedding = Embedding(trg_vocab_size, model_dimension)
        self.src_pos_embedding = PositionalEncoding(model_dimension, dropout_probability)
        self.trg_pos_embedding = PositionalEncoding(model_dimension, dropout_probability)

        mha = MultiHeadedAttention(model_dimension, number_of_heads, dropout_probability)
        pwn = PositionwiseFeedForwardNet(model_dimension, dropout_probability)
        encoder_layer = EncoderLayer(model_dimension, dropout_probability, mha, pwn)
        decoder_layer = DecoderLayer(model_dimension, dropout_probability, mha, pwn)
        self.encoder = Encoder(encoder_layer, number_of_layers)
        self.decoder = Decoder(decoder_layer, number_of_layers)
        self.decoder_generator = DecoderGenerator(model_dimension, trg_vocab_size)
        self.init_params()

    def init_params(self):
        for name, param in self.named_parameters():
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)

    def forward(self, src_token_ids_batch, trg_token_ids_batch, src_mask, trg_mask):
        src_representations_batch = self.encode(src_token_ids_batch, src_mask)
        return self.decode(trg_token_ids_batch, src_representations_batch, trg_mask, src_mask)

    def encode(self, src_token_ids_batch, src_mask):
        src_embeddings_batch = self.src_pos_embedding(self.src_embedding(src_token_ids_batch))
        return self.encoder(src_embeddings_batch, src_mask)

    def decode(self, trg_token_ids_batch, src_representations_batch, trg_mask, src_mask):
        trg_embeddings_batch = self.trg_pos_embedding(self.trg_embedding(trg_token_ids_batch))
        trg_representations_batch = self.decoder(trg_embeddings_batch, src_representations_batch, trg_mask, src_mask)
        return self.decoder_generator(trg_representations_batch)


class Encoder(nn.Module):
    def __init__(self, encoder_layer, number_of_layers):
        super().__init__()
        assert isinstance(encoder_layer, EncoderLayer), f"Expected EncoderLayer got {type(encoder_layer)}."
        self.encoder_layers = get_clones(encoder_layer, number_of_layers)

    def forward(self, src_embeddings_batch, src_mask):
        src_representations_batch = src_embeddings_batch
        for encoder_layer in self.encoder_layers:
            src_representations_batch = encoder_layer(src_representations_batch, src_mask)
        return src_representations_batch


class EncoderLayer(nn.Module):
    def __init__(self, model_dimension, dropout_probability, multi_headed_attention, pointwise_net):
        super().__init__()
        num_of_sublayers_encoder = 2
        self.sublayers = get_clones(SublayerLogic(model_dimension, dropout_probability), num_of_sublayers_encoder)
        self.multi_headed_attention = copy.deepcopy(multi_headed_attention)
        self.pointwise_net = copy.deepcopy(pointwise_net)
        self.model_dimension = model_dimension

    def forward(self, src_representations_batch, src_mask):
        encoder_self_attention = lambda srb: self.multi_headed_attention(query=srb, key=srb, value=srb, mask=src_mask)
        src_representations_batch = self.sublayers[0](src_representations_batch, encoder_self_attention)
        return self.sublayers[1](src_representations_batch, self.pointwise_net)


class Decoder(nn.Module):
    def __init__(self, decoder_layer, number_of_layers):
        super().__init__()
        assert isinstance(decoder_layer, DecoderLayer), f"Expected DecoderLayer got {type(decoder_layer)}."
        self.decoder_layers = get_clones(decoder_layer, number_of_layers)

    def forward(self, trg_embeddings_batch, src_representations_batch, trg_mask, src_mask):
        trg_representations_batch = trg_embeddings_batch
        for decoder_layer in self.decoder_layers:
            trg_representations_batch = decoder_layer(trg_representations_batch, src_representations_batch, trg_mask,
                                                      src_mask)
        return trg_representations_batch


class DecoderLayer(nn.Module):
    def __init__(self, model_dimension, dropout_probability, multi_headed_attention, pointwise_net):
        super().__init__()
        num_of_sublayers_decoder = 3
        self.sublayers = get_clones(SublayerLogic(model_dimension, dropout_probability), num_of_sublayers_decoder)
        self.trg_multi_headed_attention = copy.deepcopy(multi_headed_attention)
        self.src_multi_headed_attention = copy.deepcopy(multi_headed_attention)
        self.pointwise_net = copy.deepcopy(pointwise_net)
        self.model_dimension = model_dimension

    def forward(self, trg_representations_batch, src_representations_batch, trg_mask, src_mask):
        srb = src_representations_batch
        decoder_trg_self_attention = lambda trb: self.trg_multi_headed_attention(query=trb, key=trb, value=trb,
                                                                                 mask=trg_mask)
        decoder_src_attention = lambda trb: self.src_multi_headed_attention(query=trb, key=srb, value=srb,
                                                                            mask=src_mask)
        trg_representations_batch = self.sublayers[0](trg_representations_batch, decoder_trg_self_attention)
        trg_representations_batch = self.sublayers[1](trg_representations_batch, decoder_src_attention)
        return self.sublayers[2](trg_representations_batch, self.pointwise_net)


class SublayerLogic(nn.Module):
    """Post-norm residual connection: LayerNorm(x + Dropout(Sublayer(x)))."""

    def __init__(self, model_dimension, dropout_probability):
        super().__init__()
        self.norm = nn.LayerNorm(model_dimension)
        self.dropout = nn.Dropout(p=dropout_probability)

    def forward(self, representations_batch, sublayer_module):
        return self.norm(representations_batch + self.dropout(sublayer_module(representations_batch)))


class DecoderGenerator(nn.Module):
    def __init__(self, model_dimension, vocab_size):
        super().__init__()
        self.linear = nn.Linear(model_dimension, vocab_size)
        self.log_softmax = nn.LogSoftmax(dim=-1)

    def forward(self, trg_representations_batch):
        return self.log_softmax(self.linear(trg_representations_batch))


class PositionwiseFeedForwardNet(nn.Module):
    """The inner width is fixed at four times the model dimension, as in the paper's base model (512 -> 2048)."""

    def __init__(self, model_dimension, dropout_probability, width_mult=4):
        super().__init__()
        self.linear1 = nn.Linear(model_dimension, width_mult * model_dimension)
        self.linear2 = nn.Linear(width_mult * model_dimension, model_dimension)
        self.dropout = nn.Dropout(p=dropout_probability)
        self.relu = nn.ReLU()

    def forward(self, representations_batch):
        return self.linear2(self.dropout(self.relu(self.linear1(representations_batch))))


class MultiHeadedAttention(nn.Module):
    def __init__(self, model_dimension, number_of_heads, dropout_probability):
        super().__init__()
        assert model_dimension % number_of_heads == 0, "Model dimension must be divisible by the number of heads."
        self.head_dimension = int(model_dimension / number_of_heads)
        self.number_of_heads = number_of_heads
        self.qkv_nets = get_clones(nn.Linear(model_dimension, model_dimension), 3)
        self.out_projection_net = nn.Linear(model_dimension, model_dimension)

    def attention(self, query, key, value, mask):
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.head_dimension)
        if mask is not None:
            scores.masked_fill_(mask == torch.tensor(False), float("-inf"))
        attention_weights = scores.softmax(dim=-1)
        return torch.matmul(attention_weights, value), attention_weights

    def forward(self, query, key, value, mask):
        batch_size = query.shape[0]
        query, key, value = [net(x).view(batch_size, -1, self.number_of_heads, self.head_dimension).transpose(1, 2)
                             for net, x in zip(self.qkv_nets, (query, key, value))]
        intermediate_token_representations, _ = self.attention(query, key, value, mask)
        reshaped = intermediate_token_representations.transpose(1, 2).reshape(
            batch_size, -1, self.number_of_heads * self.head_dimension)
        return self.out_projection_net(reshaped)


class Embedding(nn.Module):
    def __init__(self, vocab_size, model_dimension):
        super().__init__()
        self.embeddings_table = nn.Embedding(vocab_size, model_dimension)
        self.model_dimension = model_dimension

    def forward(self, token_ids_batch):
        assert token_ids_batch.ndim == 2, f"Expected: (batch size, max token sequence length), got {token_ids_batch.shape}"
        return self.embeddings_table(token_ids_batch) * math.sqrt(self.model_dimension)


class PositionalEncoding(nn.Module):
    def __init__(self, model_dimension, dropout_probability, expected_max_sequence_length=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout_probability)
        position_id = torch.arange(0, expected_max_sequence_length).unsqueeze(1)
        frequencies = torch.pow(10000., -torch.arange(0, model_dimension // 2, dtype=torch.float) / model_dimension)
        positional_encodings_table = torch.zeros(expected_max_sequence_length, model_dimension)
        positional_encodings_table[:, 0::2] = torch.sin(position_id * frequencies)
        positional_encodings_table[:, 1::2] = torch.cos(position_id * frequencies)
        self.register_buffer("positional_encodings_table", positional_encodings_table)

    def forward(self, embeddings_batch):
        assert embeddings_batch.ndim == 3, f"Expected: (batch size, max token sequence length, model dimension)"
        positional_encodings = self.positional_encodings_table[:embeddings_batch.shape[1]]
        return self.dropout(embeddings_batch + positional_encodings)


def get_clones(module, num_of_deep_copies):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(num_of_deep_copies)])


def get_src_padding_mask(src_token_ids_batch, pad_token_id):
    """(batch, 1, 1, src len): True where a source token may be attended to."""
    return (src_token_ids_batch != pad_token_id).view(src_token_ids_batch.shape[0], 1, 1, -1)


def get_trg_look_ahead_mask(sequence_length, device=None):
    """(1, trg len, trg len): True where a target position may attend (itself and the positions before it)."""
    return torch.triu(torch.ones((1, sequence_length, sequence_length), device=device), diagonal=1) == 0
