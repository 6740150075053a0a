"""The stacks and the whole model."""
