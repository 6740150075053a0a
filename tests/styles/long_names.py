"""The Transformer of "Attention Is All You Need" in a single file.

Every size is spelled out in full (model_dimension, number_of_heads, ...). The model builds one prototype of each
sub-block and hands it down; every block that receives one keeps a deep copy of its own, so no weights are shared.
"""
import copy
import math

import torch
import torch.nn as nn


def make_independent_copies(module, number_of_copies):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(number_of_copies)])


class ScaledTokenEmbedding(nn.Module):
    def __init__(self, vocabulary_size, model_dimension):
        super().__init__()
        self.lookup_table = nn.Embedding(vocabulary_size, model_dimension)
        self.scaling_factor = math.sqrt(model_dimension)

    def forward(self, token_ids_batch):
        return self.scaling_factor * self.lookup_table(token_ids_batch)


class SinusoidalPositionEncoding(nn.Module):
    def __init__(self, model_dimension, dropout_probability, expected_maximum_sequence_length=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout_probability)
        position_indices = torch.arange(expected_maximum_sequence_length, dtype=torch.float32).unsqueeze(-1)
        pair_indices = torch.arange(model_dimension // 2, dtype=torch.float32)
        inverse_wavelengths = torch.pow(10000.0, -pair_indices / model_dimension)
        angles = position_indices * inverse_wavelengths
        # interleave: column 2i holds sin, column 2i + 1 holds cos of the same angle
        encodings_table = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(start_dim=1)
        self.register_buffer('encodings_table', encodings_table)

    def forward(self, embeddings_batch):
        sequence_length = embeddings_batch.shape[1]
        return self.dropout(embeddings_batch + self.encodings_table[:sequence_length])


class MultiHeadAttentionModule(nn.Module):
    def __init__(self, model_dimension, number_of_heads):
        super().__init__()
        assert model_dimension % number_of_heads == 0, 'model_dimension must be divisible by number_of_heads'
        self.number_of_heads = number_of_heads
        self.head_dimension = model_dimension // number_of_heads
        self.query_key_value_projections = make_independent_copies(nn.Linear(model_dimension, model_dimension), 3)
        self.output_projection = nn.Linear(model_dimension, model_dimension)
        self.latest_attention_weights = None

    def scaled_dot_product_attention(self, queries, keys, values, attention_mask=None):
        similarity_scores = (queries @ keys.transpose(-1, -2)) / math.sqrt(self.head_dimension)
        if attention_mask is not None:
            similarity_scores = similarity_scores.masked_fill(attention_mask == False, float('-inf'))  # noqa: E712
        attention_weights = similarity_scores.softmax(dim=-1)
        self.latest_attention_weights = attention_weights
        return attention_weights @ values

    def forward(self, query_sequence, key_sequence, value_sequence, attention_mask=None):
        batch_size = query_sequence.shape[0]

        def split_into_heads(projection, sequence):
            projected = projection(sequence)
            return projected.view(batch_size, -1, self.number_of_heads, self.head_dimension).transpose(1, 2)

        queries, keys, values = [split_into_heads(projection, sequence) for projection, sequence in
                                 zip(self.query_key_value_projections, (query_sequence, key_sequence, value_sequence))]
        attended_heads = self.scaled_dot_product_attention(queries, keys, values, attention_mask)
        concatenated_heads = attended_heads.transpose(1, 2).reshape(batch_size, -1,
                                                                    self.number_of_heads * self.head_dimension)
        return self.output_projection(concatenated_heads)


class PositionWiseFeedForward(nn.Module):
    def __init__(self, model_dimension, dropout_probability, width_mult=4):
        super().__init__()
        self.expanding_linear = nn.Linear(model_dimension, width_mult * model_dimension)
        self.contracting_linear = nn.Linear(width_mult * model_dimension, model_dimension)
        self.dropout = nn.Dropout(p=dropout_probability)

    def forward(self, representations_batch):
        hidden_activations = torch.relu(self.expanding_linear(representations_batch))
        return self.contracting_linear(self.dropout(hidden_activations))


class ResidualLayerNormWrapper(nn.Module):
    """Post-norm residual connection: LayerNorm(x + Dropout(sublayer(x)))."""

    def __init__(self, model_dimension, dropout_probability):
        super().__init__()
        self.layer_norm = nn.LayerNorm(model_dimension)
        self.dropout = nn.Dropout(p=dropout_probability)

    def forward(self, representations_batch, sublayer_function):
        residual_sum = representations_batch + self.dropout(sublayer_function(representations_batch))
        return self.layer_norm(residual_sum)


class EncoderBlock(nn.Module):
    def __init__(self, model_dimension, dropout_probability, multi_head_attention, position_wise_feed_forward):
        super().__init__()
        self.model_dimension = model_dimension
        self.self_attention = copy.deepcopy(multi_head_attention)
        self.feed_forward = copy.deepcopy(position_wise_feed_forward)
        self.residual_wrappers = make_independent_copies(ResidualLayerNormWrapper(model_dimension, dropout_probability), 2)

    def forward(self, source_representations_batch, source_mask):
        attention_wrapper, feed_forward_wrapper = self.residual_wrappers
        source_representations_batch = attention_wrapper(
            source_representations_batch, lambda batch: self.self_attention(batch, batch, batch, source_mask))
        return feed_forward_wrapper(source_representations_batch, self.feed_forward)


class DecoderBlock(nn.Module):
    def __init__(self, model_dimension, dropout_probability, multi_head_attention, position_wise_feed_forward):
        super().__init__()
        self.model_dimension = model_dimension
        self.masked_self_attention = copy.deepcopy(multi_head_attention)
        self.encoder_decoder_attention = copy.deepcopy(multi_head_attention)
        self.feed_forward = copy.deepcopy(position_wise_feed_forward)
        self.residual_wrappers = make_independent_copies(ResidualLayerNormWrapper(model_dimension, dropout_probability), 3)

    def forward(self, target_representations_batch, encoder_memory, target_mask, source_mask):
        self_wrapper, cross_wrapper, feed_forward_wrapper = self.residual_wrappers
        target_representations_batch = self_wrapper(
            target_representations_batch, lambda batch: self.masked_self_attention(batch, batch, batch, target_mask))
        target_representations_batch = cross_wrapper(
            target_representations_batch,
            lambda batch: self.encoder_decoder_attention(batch, encoder_memory, encoder_memory, source_mask))
        return feed_forward_wrapper(target_representations_batch, self.feed_forward)


class EncoderStack(nn.Module):
    def __init__(self, encoder_block, number_of_layers):
        super().__init__()
        self.encoder_blocks = make_independent_copies(encoder_block, number_of_layers)

    def forward(self, source_embeddings_batch, source_mask):
        representations_batch = source_embeddings_batch
        for encoder_block in self.encoder_blocks:
            representations_batch = encoder_block(representations_batch, source_mask)
        return representations_batch


class DecoderStack(nn.Module):
    def __init__(self, decoder_block, number_of_layers):
        super().__init__()
        self.decoder_blocks = make_independent_copies(decoder_block, number_of_layers)

    def forward(self, target_embeddings_batch, encoder_memory, target_mask, source_mask):
        representations_batch = target_embeddings_batch
        for decoder_block in self.decoder_blocks:
            representations_batch = decoder_block(representations_batch, encoder_memory, target_mask, source_mask)
        return representations_batch


class OutputVocabularyProjection(nn.Module):
    def __init__(self, model_dimension, vocabulary_size):
        super().__init__()
        self.linear = nn.Linear(model_dimension, vocabulary_size)

    def forward(self, representations_batch):
        return torch.log_softmax(self.linear(representations_batch), dim=-1)


def build_source_padding_mask(source_token_ids_batch, pad_token_id):
    """(batch, 1, 1, source length): True where a key is a real token."""
    return (source_token_ids_batch != pad_token_id)[:, None, None, :]


def build_target_causal_mask(target_sequence_length):
    """(1, 1, length, length): True where query position i may look at key position j <= i."""
    allowed = torch.ones(target_sequence_length, target_sequence_length, dtype=torch.bool).tril()
    return allowed[None, None]


class TransformerModel(nn.Module):
    def __init__(self, model_dimension, source_vocabulary_size, target_vocabulary_size, number_of_heads,
                 number_of_layers, dropout_probability):
        super().__init__()
        self.source_embedding = ScaledTokenEmbedding(source_vocabulary_size, model_dimension)
        self.target_embedding = ScaledTokenEmbedding(target_vocabulary_size, model_dimension)
        self.source_position_encoding = SinusoidalPositionEncoding(model_dimension, dropout_probability)
        self.target_position_encoding = SinusoidalPositionEncoding(model_dimension, dropout_probability)
        attention_prototype = MultiHeadAttentionModule(model_dimension, number_of_heads)
        feed_forward_prototype = PositionWiseFeedForward(model_dimension, dropout_probability)
        self.encoder = EncoderStack(EncoderBlock(model_dimension, dropout_probability, attention_prototype,
                                                 feed_forward_prototype), number_of_layers)
        self.decoder = DecoderStack(DecoderBlock(model_dimension, dropout_probability, attention_prototype,
                                                 feed_forward_prototype), number_of_layers)
        self.output_projection = OutputVocabularyProjection(model_dimension, target_vocabulary_size)

    def encode(self, source_token_ids_batch, source_mask):
        source_embeddings = self.source_position_encoding(self.source_embedding(source_token_ids_batch))
        return self.encoder(source_embeddings, source_mask)

    def decode(self, target_token_ids_batch, encoder_memory, target_mask, source_mask):
        target_embeddings = self.target_position_encoding(self.target_embedding(target_token_ids_batch))
        return self.decoder(target_embeddings, encoder_memory, target_mask, source_mask)

    def forward(self, source_token_ids_batch, target_token_ids_batch, source_mask, target_mask):
        encoder_memory = self.encode(source_token_ids_batch, source_mask)
        decoded = self.decode(target_token_ids_batch, encoder_memory, target_mask, source_mask)
        return self.output_projection(decoded)
