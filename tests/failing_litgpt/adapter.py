"""`trainer.kind: python:tests.failing_litgpt.adapter:FailingLitGPTAdapter`: the litgpt adapter, whose
launch runs litgpt under wrapper.py. Everything else (config, log lines, checkpoints, resume) is litgpt's.
`FailingToyAdapter` does the same to the toy trainer, where litgpt is not the subject."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from engine.trainers.litgpt.adapter import LitGPTAdapter
from tests.toy_trainer.adapter import ToyAdapter

WRAPPER = Path(__file__).with_name("wrapper.py")


class FailingLitGPTAdapter(LitGPTAdapter):
    def prepare_launch(self, loaded, launch_dir, resume_from, data_hash):
        return _wrapped(super().prepare_launch(loaded, launch_dir, resume_from, data_hash))


def _wrapped(spec):
    # [preprocess ... --] TRAINER COMMAND: the wrapper goes in front of the trainer's command, whatever it is.
    at = spec.argv.index("--") + 1 if "--" in spec.argv else 0
    return dataclasses.replace(spec, argv=[*spec.argv[:at], sys.executable, str(WRAPPER), *spec.argv[at:]])


class FailingToyAdapter(ToyAdapter):
    def prepare_launch(self, loaded, launch_dir, resume_from, data_hash):
        return _wrapped(super().prepare_launch(loaded, launch_dir, resume_from, data_hash))
