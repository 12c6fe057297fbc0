"""Evaluation: perplexity against length and related measurements."""
