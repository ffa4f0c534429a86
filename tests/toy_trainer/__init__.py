"""A second trainer, pure Python, that proves the trainer seam: everything it needs is this folder
(trainer.py: the program; adapter.py: how runbook launches it and reads its output and checkpoints).
Select it with ``trainer.kind: "python:tests.toy_trainer.adapter:ToyAdapter"``."""
