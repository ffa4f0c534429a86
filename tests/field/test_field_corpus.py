"""The field corpus judged by runbook itself: each real failure ending through the real watcher path.

Ended trainers go through `runbook watch --dry-run CONFIG --json` (in-process), live ones through the
playbooks' snapshot path; tests/field/harness.py says how and why. The bars: overall accuracy >= 90%,
each class with >= 5 cases >= 80%, and no case that must reach a human recovered automatically.
`benchmarks/field_accuracy.py` prints the same table (docs/benchmarks.md, "Field corpus accuracy").
"""

from __future__ import annotations

import pytest

from tests.field.harness import judge_all, load_cases, make_field_project, per_class, table

CASES = load_cases()


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    config = make_field_project(tmp_path_factory.mktemp("field"))
    return judge_all(config, CASES)


def test_every_case_was_judged(verdicts):
    assert len(verdicts) == len(CASES) >= 100
    dry = [v for v in verdicts if v.path == "dry-run"]
    assert len(dry) == sum(c.exit is not None for c in CASES)
    # the dry run really ran and decided: nearly every ended case has a plan
    assert sum(v.playbook is not None for v in dry) >= 0.95 * len(dry)


def test_overall_accuracy(verdicts):
    correct = sum(v.correct for v in verdicts)
    wrong = [f"{v.case.id}: expected {v.case.expect}, judged {v.predicted} ({v.playbook}, {v.decision})"
             for v in verdicts if not v.correct]
    assert correct / len(verdicts) >= 0.90, table(verdicts) + "\n" + "\n".join(wrong)


def test_each_large_class(verdicts):
    weak = {cls: (ok, total) for cls, (ok, total) in per_class(verdicts).items() if total >= 5 and ok / total < 0.80}
    assert not weak, table(verdicts)


def test_no_case_for_a_human_is_recovered_automatically(verdicts):
    recovered = [f"{v.case.id}: {v.playbook} {v.decision} {v.actions}" for v in verdicts if v.auto_recovered_forbidden]
    assert not recovered, "\n".join(recovered)


def test_a_full_disk_is_never_called_a_corrupt_checkpoint(verdicts):
    for v in verdicts:
        if v.case.expect == "disk-full":
            assert v.playbook != "corrupt-checkpoint", v.case.id
