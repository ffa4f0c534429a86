"""The field corpus judged by runbook itself: each real failure ending through the real watcher path.

Ended trainers go through `runbook watch --dry-run CONFIG --json` (in-process), live ones through the
playbooks' snapshot path; tests/field/harness.py says how and why. The bars, on the rounds-1-3 corpus the
playbooks were written to: overall accuracy >= 90%, each class with >= 5 cases >= 80%. On every case, old
and round 4 alike: no case that must reach a human recovered automatically. The round-4 held-out cases
(tests/field/corpus/held_out.txt, drawn before any rule was written for them) are scored, not held to an
accuracy bar:
`benchmarks/field_accuracy.py --groups` prints each group's table (docs/benchmarks.md, "Field corpus accuracy").
"""

from __future__ import annotations

import pytest

from tests.field.harness import group_of, judge_all, load_cases, load_held_out, make_field_project, per_class, table

CASES = load_cases()
HELD_OUT = load_held_out()


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    config = make_field_project(tmp_path_factory.mktemp("field"))
    return judge_all(config, CASES)


@pytest.fixture(scope="module")
def old(verdicts):
    return [v for v in verdicts if group_of(v.case, HELD_OUT) == "old"]


def test_every_case_was_judged(verdicts):
    assert len(verdicts) == len(CASES) >= 100
    dry = [v for v in verdicts if v.path == "dry-run"]
    assert len(dry) == sum(c.exit is not None for c in CASES)
    # the dry run really ran and decided: nearly every ended case has a plan
    assert sum(v.playbook is not None for v in dry) >= 0.95 * len(dry)


def test_held_out_is_a_third_of_round_4_drawn_from_it():
    round4 = {c.id for c in CASES if c.round == 4}
    assert HELD_OUT <= round4, sorted(HELD_OUT - round4)
    assert len(HELD_OUT) == len(round4) // 3 and len(round4) >= 60


def test_overall_accuracy(old):
    correct = sum(v.correct for v in old)
    wrong = [f"{v.case.id}: expected {v.case.expect}, judged {v.predicted} ({v.playbook}, {v.decision})"
             for v in old if not v.correct]
    assert correct / len(old) >= 0.90, table(old) + "\n" + "\n".join(wrong)


def test_each_large_class(old):
    weak = {cls: (ok, total) for cls, (ok, total) in per_class(old).items() if total >= 5 and ok / total < 0.80}
    assert not weak, table(old)


def test_no_case_for_a_human_is_recovered_automatically(verdicts):
    # Every case, old, round-4 written-from and held-out alike: a case that must reach a human never gets a
    # recovery verb first, whether or not a rule was written from it.
    recovered = [f"{v.case.id} [{group_of(v.case, HELD_OUT)}]: {v.playbook} {v.decision} {v.actions}"
                 for v in verdicts if v.auto_recovered_forbidden]
    assert not recovered, "\n".join(recovered)


def test_a_full_disk_is_never_called_a_corrupt_checkpoint(verdicts):
    for v in verdicts:
        if v.case.expect == "disk-full":
            assert v.playbook != "corrupt-checkpoint", v.case.id
