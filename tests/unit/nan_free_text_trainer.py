"""The toy trainer (tests/toy_trainer) run through an echo that, after its step AT, prints the same free-text
line COUNT times between its progress lines: what a healthy trainer's warning or a user's print looks like
("... loss = nan ..."), while every progress line runbook parses carries a finite loss.

`trainer.kind: python:tests.unit.nan_free_text_trainer:FreeTextNanToyAdapter`; as a script:
`python nan_free_text_trainer.py TOY COMMAND...` (the adapter puts it in front of the toy's command).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

FREE_TEXT = "WARNING: batch 17 skipped by the fp16 dry pass (loss = nan there); training continues on the real loss"
AT, COUNT = 8, 6
TOY_STEP = re.compile(r"^toy step (\d+)/")


def main(command: list[str]) -> int:
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    printed = 0
    for raw in child.stdout:
        line = raw.decode("utf-8", "replace")
        sys.stdout.write(line)
        step = TOY_STEP.match(line)
        if step and int(step.group(1)) >= AT and printed < COUNT:
            sys.stdout.write(FREE_TEXT + "\n")
            printed += 1
        sys.stdout.flush()
    return child.wait()


try:   # the adapter side; the script side needs none of it
    from tests.toy_trainer.adapter import ToyAdapter
except ImportError:   # run as a script without the repository on sys.path
    ToyAdapter = object


class FreeTextNanToyAdapter(ToyAdapter):
    def prepare_launch(self, loaded, launch_dir, resume_from, data_hash):
        spec = super().prepare_launch(loaded, launch_dir, resume_from, data_hash)
        return dataclasses.replace(spec, argv=[sys.executable, __file__, *spec.argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
