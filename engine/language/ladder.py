"""PURE. Which rung of the divergence ladder a plan stands on (nan and loss-spike, playbooks/*.yaml): read from the
actions that will run, so `runbook replay` and `triage` say it the same way for any playbook that climbs one.

    rung 1  roll back and lower the lr (the first divergence)
    rung 2  roll back and skip the data window at the lr before rung 1 (it came back at the same data)
    rung 3  roll back and cut the lr harder (it came back elsewhere, or again after the skip: the lr)
    past the ladder: escalated to a person
"""

from __future__ import annotations

from typing import Iterable

RUNGS = {
    1: "rung 1 of the divergence ladder: roll back and lower the lr",
    2: "rung 2 of the divergence ladder: roll back and skip the data window at the lr before rung 1",
    3: "rung 3 of the divergence ladder: roll back and cut the lr harder",
}
PAST = "past the divergence ladder: escalated to a person"


def rung(verbs_that_run: Iterable[str], attempt: int) -> str | None:
    """The rung a plan stands on, given the verbs of its steps that will run (guards true) and the playbook's attempt;
    None for a plan that rolls nothing back (not a ladder)."""
    verbs = set(verbs_that_run)
    if "escalate" in verbs and "rollback" not in verbs:
        return PAST if attempt > 1 else None
    if "rollback" not in verbs:
        return None
    if "skip_data" in verbs:
        return RUNGS[2]
    if "set_hyperparameters" not in verbs:
        return None
    return RUNGS[1] if attempt <= 1 else RUNGS[3]
