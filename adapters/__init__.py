"""Adapters that turn other people's Transformer code into something the conformance checks can run."""
