"""PURE. A remedy that kills the run is undone: the engine's rule, for every trainer kind.

A recovery that changed the environment (set_env) or the run config (set_hyperparameters) and relaunched
is on probation until that launch makes its first progress. When the launch dies before its first step
instead, of a failure other than the one the remedy answered, the change is the likeliest cause (measured:
TORCH_DISTRIBUTED_DEBUG=DETAIL, collective-timeout's old diagnosis, killed every gloo rank with SIGSEGV at
start-up, and the run escalated by runbook's own hand). The change is reverted, said in both incidents and
the run log, and the recovery retried once without it (engine/watch/incident_runner.py).
"""

from __future__ import annotations

from engine.core.state import StateSnapshot
from engine.records.incident import Incident


def how_it_died(snapshot: StateSnapshot) -> str:
    ranks, trainer = snapshot.trainer.ranks, snapshot.trainer
    signal = ranks.first_failed_signal or trainer.signal
    if signal:
        return signal
    return f"exit code {trainer.exit_code}" if trainer.exit_code is not None else "an unknown exit"


def remedy_to_blame(on_probation: Incident | None, failure_playbook: str, snapshot: StateSnapshot) -> str | None:
    """Why the remedy of `on_probation` (recovered, its relaunch not yet past its first step) is the cause of
    this failure; None when it is not to blame (no change made, already reverted once, the trainer still runs,
    or the same failure came back: the remedy did not cure it, it did not cause it)."""
    if on_probation is None or on_probation.reverted:
        return None
    if not (on_probation.env_changes or on_probation.config_changes):
        return None
    if snapshot.trainer.alive or failure_playbook == on_probation.playbook:
        return None
    return f"the next launch died of {how_it_died(snapshot)} before its first step ({failure_playbook})"


def change_summary(incident: Incident) -> str:
    """PURE. 'TORCH_DISTRIBUTED_DEBUG=DETAIL (was unset), micro_batch_size 2 (was 4)'."""
    env = [f"{name}={after} (was {'unset' if before is None else before})"
           for name, (before, after) in incident.env_changes.items()]
    config = [f"{key} {after} (was {before})" for key, (before, after) in incident.config_changes.items()]
    return ", ".join(env + config)
