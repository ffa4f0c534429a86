"""Per-class accuracy of runbook's decisions on the field corpus (tests/field/corpus), as markdown tables.

    .venv/bin/python benchmarks/field_accuracy.py [--wrong] [--groups]

Same harness as tests/field/test_field_corpus.py (tests/field/harness.py): every case whose trainer
ended goes through `runbook watch --dry-run CONFIG --json` in-process on a run folder made for it; a case
whose trainer was still running is judged through the playbooks' snapshot path. --wrong also lists the
cases judged wrong. --groups prints one table per group as well as the whole corpus: `old` (rounds 1-3),
`written-from` (round-4 cases rules may be written from) and `held-out` (round-4 cases listed in
tests/field/corpus/held_out.txt, drawn before any rule for them was written: the honest measure).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.field.harness import GROUPS, group_of, judge_all, load_cases, load_held_out, make_field_project, table  # noqa: E402

GROUP_TITLES = {
    "old": "old corpus (rounds 1-3)",
    "written-from": "round 4, written-from (rules may be written from these)",
    "held-out": "round 4, held out (tests/field/corpus/held_out.txt; no rule written from these)",
}


def main(argv: list[str]) -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        config = make_field_project(Path(tmp))
        verdicts = judge_all(config, load_cases())
    held_out = load_held_out()
    command = "benchmarks/field_accuracy.py " + " ".join(argv)
    print(f"command: .venv/bin/python {command.strip()}\n")
    print("### whole corpus\n")
    print(table(verdicts))
    if "--groups" in argv:
        for group in GROUPS:
            members = [v for v in verdicts if group_of(v.case, held_out) == group]
            if members:
                print(f"\n### {GROUP_TITLES[group]}\n")
                print(table(members))
    dry = sum(v.path == "dry-run" for v in verdicts)
    print(f"\n{len(verdicts)} cases: {dry} through `runbook watch --dry-run --json`, {len(verdicts) - dry} through the "
          f"snapshot path (trainer still running); {time.monotonic() - started:.0f} s")
    if "--wrong" in argv:
        for v in verdicts:
            if not v.correct:
                group = group_of(v.case, held_out)
                print(f"- [{group}] {v.case.id}: expected {v.case.expect}, judged {v.predicted} "
                      f"({v.playbook}, {v.decision}, {v.actions})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
