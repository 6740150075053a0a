"""Conformance suite for implementations of "Attention Is All You Need" (run ``pytest conformance --impl=...``)."""
