"""Runs the command after it (litgpt pretrain ...), echoing its output; once it logs optimizer step N,
stops it and raises a custom exception, as a trainer with a bug of its own would.

Environment: RUNBOOK_TEST_FAILURES, e.g. "12:shard,16:tokenizer": each failure happens once (a marker
file per failure in RUNBOOK_TEST_FAIL_ONCE_DIR); a launch arms the first one that has not happened yet.
SIGTERM/SIGINT are passed to litgpt, and the wrapper then ends by the same signal.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path


TOY_PROGRESS = re.compile(r"^toy step (\d+)/")   # tests/toy_trainer's progress line


class ShardHeaderCorrupted(Exception):
    pass


class TokenizerVocabDrift(Exception):
    pass


def fail(kind: str, step: int) -> None:
    where = f"/tmp/shards-{random.randrange(10**6)}/train-{random.randrange(10**5):05d}.bin"
    if kind == "tokenizer":
        raise TokenizerVocabDrift(f"vocabulary hash {random.getrandbits(40):x}9 changed under {where} after step {step}")
    raise ShardHeaderCorrupted(f"shard {hex(random.getrandbits(48))} index {random.randrange(10**6)} in {where} "
                               f"has a bad header after step {step}")


def main(command: list[str]) -> int:
    from engine.observe.events import Progress
    from engine.trainers.litgpt.log_lines import parse_line

    markers = Path(os.environ["RUNBOOK_TEST_FAIL_ONCE_DIR"])
    planned = [(i, *item.split(":")) for i, item in enumerate(os.environ.get("RUNBOOK_TEST_FAILURES", "").split(",")) if item]
    armed = next(((markers / f"failure-{i}", int(step), kind) for i, step, kind in planned
                  if not (markers / f"failure-{i}").exists()), None)
    # The toy trainer holds at the armed step (a real trainer is far slower than this loop): without that, a
    # toy with no pause runs ahead through the pipe's buffer, saving checkpoints past the step it "failed" at.
    env = {**os.environ, "RUNBOOK_TOY_HOLD_AT_STEP": str(armed[1])} if armed else None
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    received: list[int] = []

    def forward(signum, _frame):
        received.append(signum)
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for raw in child.stdout:
        sys.stdout.write(raw.decode("utf-8", "replace"))
        sys.stdout.flush()
        line = raw.decode("utf-8", "replace").rstrip("\n")
        event, toy = parse_line(line), TOY_PROGRESS.match(line)
        step = event.step if isinstance(event, Progress) else int(toy.group(1)) if toy else None
        if armed and step is not None and step >= armed[1]:
            child.kill()
            child.wait()
            armed[0].touch()
            fail(armed[2], step)
    code = child.wait()
    if received:
        signal.signal(received[0], signal.SIG_DFL)
        os.kill(os.getpid(), received[0])
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
