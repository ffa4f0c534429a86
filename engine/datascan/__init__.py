"""Finding and cleaning bad lines in training text with the run's tokenizer."""
