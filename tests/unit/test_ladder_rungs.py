"""Which rung of the divergence ladder a plan stands on (engine/language/ladder.py), through the shipped nan and
loss-spike playbooks' own plans: attempt 1 lowers the lr; attempt 2 at the same data skips the window; attempt 2
elsewhere (or 3) cuts harder; past the limit it escalates. `runbook replay` and `triage` print it."""

from __future__ import annotations

import pytest

from engine.core.state import Metrics, StateSnapshot, TrainerStatus
from engine.language import ladder
from engine.language.planner import plan
from engine.language.loader import load_playbooks
from tests.language.test_playbook_language import CONFIG
from tests.conftest import REPO


def rung_of(name: str, attempt: int, previous_bad_step: int | None) -> str | None:
    [playbook] = [p for p in load_playbooks([REPO / "playbooks"]) if p.name == name]
    metrics = Metrics(step=40, loss=20.0, loss_best_median=2.0, last_healthy_step=30, previous_bad_step=previous_bad_step,
                      loss_history=[20.0] * 5)
    snapshot = StateSnapshot(metrics=metrics, trainer=TrainerStatus(alive=False, exit_code=1))
    steps = plan(playbook, snapshot, CONFIG, attempt)
    return ladder.rung((s.verb for s in steps if s.skipped is None and s.error is None), attempt)


@pytest.mark.parametrize("name", ["nan", "loss-spike"])
def test_the_shipped_divergence_playbooks_climb_the_ladder(name):
    assert rung_of(name, 1, None) == ladder.RUNGS[1]
    assert rung_of(name, 2, 30) == ladder.RUNGS[2]          # back at the same first bad step: the data
    assert rung_of(name, 2, 5) == ladder.RUNGS[3]           # back elsewhere: the lr
    assert rung_of(name, 3, 30) == ladder.RUNGS[3]


def test_plans_that_roll_nothing_back_stand_on_no_rung():
    assert ladder.rung(["stop", "resume"], 1) is None
    assert ladder.rung(["rollback", "resume"], 1) is None   # a rollback that changes nothing else (corrupt checkpoint)
    assert ladder.rung(["escalate"], 5) == ladder.PAST and ladder.rung(["escalate"], 1) is None


def test_replay_says_the_rung_then_and_now():
    from engine.language.replay import PlannedAction, ReplayResult, Verdict

    def verdict(attempt: int, *verbs: str, skipped: tuple[str, ...] = ()) -> Verdict:
        actions = tuple(PlannedAction(v, v) for v in verbs) + tuple(PlannedAction(v, v, note="if: false") for v in skipped)
        return Verdict("recover", "nan", None, "NaN", actions, attempt)

    then = verdict(2, "stop", "rollback", "set_hyperparameters", "resume", skipped=("skip_data",))
    now = verdict(2, "stop", "rollback", "skip_data", "set_hyperparameters", "resume")
    assert (then.rung, now.rung) == (ladder.RUNGS[3], ladder.RUNGS[2])   # a skipped guard is no rung
    text = ReplayResult("incident-2", "different-actions", then, now).render()
    assert f"  rung: then {ladder.RUNGS[3]}; now {ladder.RUNGS[2]}" in text, text
    assert ReplayResult("incident-2", "different-actions", now, now).to_dict()["now"]["rung"] == ladder.RUNGS[2]
    assert f"  rung: {ladder.RUNGS[2]}" in ReplayResult("incident-2", "unchanged", now, now).render()
