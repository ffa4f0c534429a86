"""A user's own training script as a supervised trainer (kind `script`): runbook/sdk.py's lines, a folder
per checkpoint, templated arguments for resume, micro-batch and lr."""
