"""Per-class accuracy of runbook's decisions on the field corpus (tests/field/corpus), as a markdown table.

    .venv/bin/python benchmarks/field_accuracy.py [--wrong]

Same harness as tests/field/test_field_corpus.py (tests/field/harness.py): every case whose trainer
ended goes through `runbook watch --dry-run CONFIG --json` in-process on a run folder made for it; a case
whose trainer was still running is judged through the playbooks' snapshot path. --wrong also lists the
cases judged wrong.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.field.harness import judge_all, load_cases, make_field_project, table  # noqa: E402


def main(argv: list[str]) -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        config = make_field_project(Path(tmp))
        verdicts = judge_all(config, load_cases())
    print(table(verdicts))
    dry = sum(v.path == "dry-run" for v in verdicts)
    print(f"\n{len(verdicts)} cases: {dry} through `runbook watch --dry-run --json`, {len(verdicts) - dry} through the "
          f"snapshot path (trainer still running); {time.monotonic() - started:.0f} s")
    if "--wrong" in argv:
        for v in verdicts:
            if not v.correct:
                print(f"- {v.case.id}: expected {v.case.expect}, judged {v.predicted} ({v.playbook}, {v.decision}, {v.actions})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
