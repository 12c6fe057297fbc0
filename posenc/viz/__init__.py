"""Pictures: perplexity against length, training curves, attention entropy."""
