"""Every path under a run's `run_dir`, in one place: what the watcher writes and every reader finds.

    run_dir/
      journal.jsonl                 what the engine did (engine/records/journal.py)
      watch.lock                    one watcher per run folder (engine/core/lock.py)
      heartbeat.json                the watcher's pulse (engine/watch/upkeep.py)
      trainer.pid                   the current trainer's pid, for people and fault injection
      wandb-run-id                  the run's WANDB_RUN_ID, made once (engine/process/trainer_env.py)
      owner.json                    the config (project, out_dir) that first watched it; another project's is refused (engine/core/run_dir_owner.py)
      run-id                        the run's identity, made once; out_dir's owner marker names it (engine/checkpoints/out_dir_claim.py)
      incidents/incident-N.json     one record per incident (engine/records/incident_store.py)
      logs/trainer-NNN.log          each launch's output (gzipped later by upkeep)
      launches/launch-NNN/          each launch's run config copy, trainer config and exit status
      quarantine/                   checkpoints runbook moved out of the trainer's way
      resume/                       rescaled copies of checkpoints handed to a relaunch
      outbox/                       notices not yet delivered (runbook/outbox.py); outbox/<receiver>/ per receiver
      report/                       `runbook report`'s default output
      metrics-address               the Prometheus endpoint's URL while it serves (engine/watch/metrics.py)
      slurm/                        the job script and one record per SLURM allocation (engine/cluster/slurm_records.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunFolder:
    root: Path

    @property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    @property
    def lock(self) -> Path:
        return self.root / "watch.lock"

    @property
    def heartbeat(self) -> Path:
        return self.root / "heartbeat.json"

    @property
    def trainer_pid(self) -> Path:
        return self.root / "trainer.pid"

    @property
    def wandb_run_id(self) -> Path:
        return self.root / "wandb-run-id"

    @property
    def run_id(self) -> Path:
        return self.root / "run-id"

    @property
    def incidents(self) -> Path:
        return self.root / "incidents"

    def incident(self, incident_id: str) -> Path:
        return self.incidents / f"{incident_id}.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def trainer_log(self, launch: int) -> Path:
        return self.logs / f"trainer-{launch:03d}.log"

    @property
    def launches(self) -> Path:
        return self.root / "launches"

    def launch_dir(self, launch: int) -> Path:
        return self.launches / f"launch-{launch:03d}"

    @staticmethod
    def launch_of(path: Path) -> int | None:
        """The launch number of a file in a launch folder (launch_dir's inverse); None elsewhere."""
        digits = path.parent.name.removeprefix("launch-")
        return int(digits) if path.parent.name.startswith("launch-") and digits.isdigit() else None

    def exit_status(self, launch: int) -> Path:
        """Where that launch's launcher records how the trainer ended (engine/process/launcher.py)."""
        return self.launch_dir(launch) / "exit-status.json"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    @property
    def resume(self) -> Path:
        return self.root / "resume"

    @property
    def outbox(self) -> Path:
        return self.root / "outbox"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def metrics_address(self) -> Path:
        return self.root / "metrics-address"

    @property
    def slurm(self) -> Path:
        return self.root / "slurm"
