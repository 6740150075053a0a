"""nets: an encoder-decoder Transformer split into small sub-packages."""
