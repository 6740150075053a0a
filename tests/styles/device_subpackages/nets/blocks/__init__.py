"""Encoder and decoder blocks."""
