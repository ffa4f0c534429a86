"""Where a watcher starts: continue what the journal says was under way, or launch the trainer.

Read at every start of `runbook watch`: a fresh run launches from scratch; a restarted watcher
re-attaches to a live trainer, judges one that ended while nobody watched (its launcher recorded the
exit), finishes an incident a killed watcher left open (exactly once: engine/watch/incident_runner.py),
reports incidents it closed but never reported, and removes the temp files of a write it was
killed in; a run stopped by a person resumes from the newest verified checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from engine.core.durable import remove_stale_temps
from engine.core.state import RunPhase
from engine.process import warm_spare
from engine.process.trainer_env import trainer_environment
from engine.trainers import adapter_for

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig
    from engine.process.trainer_process import TrainerProcess
    from engine.watch.supervisor import Supervisor


def start_or_continue(sup: Supervisor) -> None:
    """`sup` is the engine.watch.supervisor.Supervisor; only its public methods are used (it assigns its own state)."""
    past = sup.journal.replay()
    if sup.incidents.adopt_unjournaled(past.incidents) is not None:
        past = sup.journal.replay()
    sup.continue_from(past)
    sup.incidents.report_unreported([i for i in past.unreported if i != (past.open_incident or {}).get("incident")])
    trainer = None
    if past.trainer_pid and past.trainer_log:   # the journal records the two together
        # Whatever the run's phase: a trainer left running (a watcher killed or crashed; an escalation
        # stops its trainer, but one of an older runbook did not) is taken back rather than doubled
        # (engine/process/identity.py proves it is this run's).
        trainer = sup.control.attach(past.trainer_pid, Path(past.trainer_log), past.trainer_started, past.launches)
        if not trainer.alive and past.phase in (RunPhase.COMPLETED, RunPhase.STOPPED, RunPhase.ESCALATED):
            trainer = None   # it ended and that end was already judged
        elif trainer.alive and past.phase in (RunPhase.STOPPED, RunPhase.ESCALATED):
            take_back(sup, trainer, f"left running unsupervised after the run was {past.phase.value}")
            return
    if past.open_incident is None and (trainer is None or not trainer.alive):
        # Launched by a watcher killed before it journaled the launch. (Inside an open incident the
        # recovery's relaunch refuses a second trainer instead, naming the live one.)
        adopted = sup.control.adopt_unjournaled()
        if adopted is not None and adopted.alive:
            take_back(sup, adopted, f"of launch {sup.control.launches}, which the journal had not recorded "
                                    "(its watcher was killed as it launched)")
            return
        # A live trainer of this run folder that cannot be proven the journal's (its record lost the start
        # time): judged neither as ended nor as ours, and never doubled (exit 15, naming it).
        sup.control.refuse_second_trainer()
    # A live trainer may be in the middle of a save: a checkpoint folder it is writing looks corrupt, and
    # moving it away would crash that save. Its unsealed checkpoints are left to the watch loop, which
    # reads from the trainer's log which save is under way.
    sup.catalog.refresh(quarantine_corrupt=True, force=True, sealed_only=trainer is not None and trainer.alive)
    for folder in (sup.loaded.folder.incidents, sup.loaded.path.parent, sup.loaded.run_dir):
        remove_stale_temps(folder)   # a watcher killed mid-write left its temp file
    if past.phase == RunPhase.COMPLETED:
        sup.settle(RunPhase.COMPLETED, "the journal says the run completed")
        return
    if trainer is not None:
        sup.observer.follow(trainer.log_path, sup.control.progress_meaning, replay_existing=True)
        if trainer.alive and past.open_incident is None:
            sup.transition(RunPhase.RUNNING, f"re-attached to trainer pid {trainer.pid}")
            return
        if past.open_incident is None:
            # It ended while no watcher was running: the next tick judges that exit (its launcher
            # recorded it) with the launch's log, as if it had been watched.
            how = f"with exit code {trainer.poll()}" if trainer.exit_known else "with an exit status nobody recorded"
            if trainer.proof is not None and trainer.proof.alive and not trainer.proof.ours:
                how += f" (the process now under that pid is not this run's: {trainer.proof.reason}; it is left alone)"
            sup.transition(RunPhase.RUNNING, f"trainer pid {trainer.pid} ended {how} while no watcher was running")
            return
    if past.open_incident is not None:
        sup.incidents.continue_open(past.open_incident, past.done_actions, sup.playbooks)
        sup.reread_history()
        return
    newest = sup.catalog.newest_verified()
    if newest is None:
        sup.launch(None)
        return
    plan = sup.control.adapter.prepare_resume(newest, sup.loaded, sup.loaded.folder.resume)
    if plan.note:   # no incident at start-up: what the resume copy changed goes to the journal
        sup.journal.append("resume_rewritten", detail=plan.detail, note=plan.note)
    sup.launch(plan.file)


def take_back(sup: Supervisor, trainer: TrainerProcess, why: str) -> None:
    """A live trainer no incident is open for: follow it again, judging only its sealed checkpoints
    (it may be in the middle of a save)."""
    sup.transition(RunPhase.RUNNING, f"re-attached to trainer pid {trainer.pid}, {why}")
    sup.observer.follow(trainer.log_path, sup.control.progress_meaning, replay_existing=True)
    sup.catalog.refresh(quarantine_corrupt=True, force=True, sealed_only=True)


def prestart_spare(loaded: LoadedConfig, spares: warm_spare.SparePool) -> None:
    """The first launch's warm spare (trainer.warm_spare, engine/process/warm_spare.py), started before the
    watcher's own start-up checks (the data hash, litgpt's preflight parse: 4-7 s on 2 cores) so that its
    imports run beside them and the first launch is warm too. A watcher that then refuses to start
    discards it (runbook/watch_command.py); one killed outright leaves it until spare_main sees its
    watcher gone and exits."""
    from dataclasses import replace


    if not loaded.config.trainer.warm_spare:
        return
    shape = getattr(adapter_for(loaded.config.trainer.kind), "spare_spec", None)
    try:
        spec = shape(loaded) if shape is not None else None
    except Exception:  # noqa: BLE001 - the watcher's own checks, next, say what is wrong with the config
        return
    if spec is None:
        return
    spares.prestart(replace(spec, env=trainer_environment(spec.env, loaded.folder, loaded.config.notifications)))

