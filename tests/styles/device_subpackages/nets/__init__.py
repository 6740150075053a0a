"""nets: a Transformer split into sub-packages."""
