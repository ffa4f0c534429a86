"""A user's Hugging Face Trainer script as a supervised trainer (kind `hf-trainer`): runbook's
TrainerCallback (runbook/hf_callback.py) prints the lines, HF's own `checkpoint-N` folders are the checkpoints."""
