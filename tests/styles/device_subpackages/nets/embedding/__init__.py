"""Token and position embeddings."""
