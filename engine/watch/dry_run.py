"""`runbook watch --dry-run`: the same observation, matching and planning, and no effect at all."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from engine.core.events import DryRun, DryRunPlan, PlannedStepView
from engine.language.matcher import MatchMemory, decide
from engine.language.planner import plan
from engine.core.state import RunPhase, StateSnapshot
from engine.process.trainer_process import signal_name

if TYPE_CHECKING:
    from engine.language.matcher import Decision
    from engine.watch.supervisor import Supervisor


def observe_without_acting(sup: Supervisor) -> RunPhase:
    """Observe without acting: attach to a live trainer (read-only, no lock) and print what each
    recovery would do, or judge the state the run is in now. Nothing is signalled or written."""
    past = sup.journal.replay()
    sup.continue_from(past, acting=False)
    control = sup.control
    attached = (control.attach(past.trainer_pid, Path(past.trainer_log), past.trainer_started, past.launches)
                if past.trainer_pid and past.trainer_log else None)   # the journal records the two together
    if attached is not None and not attached.alive:
        if attached.exit_known:   # what its launcher recorded, though no watcher saw it
            control.past_exit = (attached.poll(), signal_name(attached.poll()))
        control.process = attached = None
    if past.trainer_log:
        sup.observer.follow(Path(past.trainer_log), control.progress_meaning, replay_existing=True)
    if attached is None:
        if control.past_exit == (None, None):
            control.past_exit = (past.last_exit_code, past.last_exit_signal)
        sup.events(DryRun("no live trainer: judging the run folder as it is now"))
        snapshot = with_journal_pid(sup.observe(), past.trainer_pid)
        outcome = decide(snapshot, sup.loaded.config, sup.playbooks, MatchMemory(), sup.history)
        if outcome.decision is None:
            sup.events(DryRun("no playbook matches the current state"))
        else:
            _show_plan(sup, outcome.decision, snapshot)
        return RunPhase.STOPPED
    sup.settle(RunPhase.RUNNING, "a dry run's read-only watch")
    sup.events(DryRun(f"watching trainer pid {attached.pid} without acting"))
    sup.install_signal_handlers()
    memory = MatchMemory()   # this watch's own: nothing it decides is acted on
    while attached.alive and not sup.stop_requested:
        snapshot = sup.observe()
        outcome = decide(snapshot, sup.loaded.config, sup.playbooks, memory, sup.history)
        memory = outcome.memory
        if outcome.decision is not None and outcome.decision.kind != "wait":
            _show_plan(sup, outcome.decision, snapshot)
        time.sleep(sup.loaded.config.watch.poll_interval_s)
    return RunPhase.STOPPED


def with_journal_pid(snapshot: StateSnapshot, pid: int | None) -> StateSnapshot:
    """PURE. The snapshot of a trainer that is gone carries no pid (no live process was attached), so a
    plan's text read "trainer pid None ended"; the journal knows which trainer it was."""
    if snapshot.trainer.pid is not None or not pid:
        return snapshot
    return snapshot.model_copy(update={"trainer": snapshot.trainer.model_copy(update={"pid": pid})})


def _show_plan(sup: Supervisor, decision: Decision, snapshot: StateSnapshot) -> None:
    steps = plan(decision.playbook, snapshot, sup.loaded.config, sup.attempt(decision.playbook))
    sup.events(DryRunPlan(decision.playbook.name, decision.kind, str(decision.reason),
                          tuple(map(PlannedStepView.of, steps))))
