"""The settings models of the watcher's features, as sections of the run config.

They live here, on the bottom floor, so that the run config (engine/core/config.py) imports no
feature module; each feature imports its own model from here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


# --- notice_poller (engine/cluster/notice_poller.py) ---
class CloudNoticeSettings(BaseModel):
    """`watch.cloud_notices:` in the run config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(False, description="poll the clouds' interruption notices and save before the signal")
    providers: list[Literal["aws", "gcp"]] = Field(["aws", "gcp"], description="which metadata services to poll: aws, gcp")
    interval_s: float = Field(5.0, gt=0, description="seconds between polls (AWS advises 5)")
    timeout_s: float = Field(1.0, gt=0, description="per request; off the cloud the endpoint does not answer")
    aws_base_url: str = Field("http://169.254.169.254", description="the EC2 instance metadata service")
    gcp_base_url: str = Field("http://metadata.google.internal", description="the GCE metadata server")



# --- slurm (engine/cluster/slurm.py) ---
RequeueCause = Literal["time-limit", "preemption", "signal"]
REQUEUE_CAUSES: tuple[RequeueCause, ...] = ("time-limit", "preemption", "signal")


_TIME_OPTION = re.compile(r"^(?:\d+-)?\d+(?::\d+){0,2}$|^UNLIMITED$|^INFINITE$", re.IGNORECASE)


_SAFE_WORD = re.compile(r"^[A-Za-z0-9_.,:=@%+/-]+$")


class SlurmSettings(BaseModel):
    """`slurm:` in the run config: what `runbook slurm submit` writes and what the watcher does in a job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str | None = Field(None, description="sbatch --partition (default: the cluster's default)")
    time: str | None = Field(None, description="sbatch --time, e.g. 24:00:00 or 2-00:00:00 (default: the partition's)")
    job_name: str | None = Field(None, description="sbatch --job-name (default: runbook-<run folder name>)")
    signal_lead_s: int = Field(300, gt=0, le=65535, description="SIGTERM to the watcher this long before the time "
                               "limit (sbatch --signal=B:TERM@N); must exceed watch.grace_period_s")
    requeue_on: list[RequeueCause] = Field(
        list(REQUEUE_CAUSES), description="notices after whose save the watcher requeues its own job "
        "(scontrol requeue): time-limit, preemption, signal (an unexplained SIGTERM, e.g. scancel --signal)")
    sbatch_options: list[str] = Field(default_factory=list, description="more #SBATCH lines, e.g. --gpus-per-node=4")
    command_timeout_s: float = Field(20.0, gt=0, le=600, description="bound on each scontrol/sacct/sbatch call")

    @field_validator("partition", "job_name")
    @classmethod
    def _one_word(cls, value: str | None) -> str | None:
        if value is not None and not _SAFE_WORD.match(value):
            raise ValueError(f"{value!r}: one word of letters, digits and _.,:=@%+/- (it goes into a job script)")
        return value

    @field_validator("time")
    @classmethod
    def _slurm_time(cls, value: str | None) -> str | None:
        if value is not None and not _TIME_OPTION.match(value):
            raise ValueError(f"{value!r} is not a SLURM time (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]], UNLIMITED)")
        return value

    @field_validator("sbatch_options")
    @classmethod
    def _options(cls, value: list[str]) -> list[str]:
        for option in value:
            if not option.startswith("-") or "\n" in option or "\x00" in option:
                raise ValueError(f"{option!r}: an sbatch option starts with '-' and is one line")
        return value



# --- upkeep (engine/watch/upkeep.py) ---
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


class UpkeepSettings(BaseModel):
    """`upkeep:` in the run config. An interval of null switches that job off."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    heartbeat_interval_s: float | None = Field(30.0, gt=0, description="write <run_dir>/heartbeat.json (time, step, free disk)")
    retention_interval_s: float | None = Field(60.0, gt=0, description="prune checkpoints to keep_last_k + best")
    log_gzip_interval_s: float | None = Field(600.0, gt=0, description="gzip finished trainer logs in <run_dir>/logs")
    digest_enabled: bool = Field(False, description="post a daily digest through the Slack notifier")
    digest_time: str = Field("09:00", description="local time of the daily digest, HH:MM")

    @field_validator("digest_time")
    @classmethod
    def _hhmm(cls, value: str) -> str:
        if not _HHMM.match(value):
            raise ValueError(f"digest_time must be HH:MM (24 h), got {value!r}")
        return value



# --- metrics (engine/watch/metrics.py) ---
class MetricsSettings(BaseModel):
    """`watch.metrics:` in the run config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int | None = Field(None, ge=0, le=65535, strict=True,
                             description="serve Prometheus metrics on this port (0: any free port, written to "
                                         "<run_dir>/metrics-address); none: no endpoint")
    host: str = Field("127.0.0.1", min_length=1, description="address to listen on (0.0.0.0: every interface)")
    linger_s: float = Field(30.0, ge=0, le=3600, description="after the run escalates, keep serving this long before the "
                            "watcher exits, so that a scrape sees the escalation (at least 2 x Prometheus' scrape "
                            "interval); a signal to the watcher ends it at once")


# --- the run config's own sections (engine/core/config.py) ---
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # `lr: .inf` is a typo, not a value

    @field_validator("*", mode="after")
    @classmethod
    def _usable_paths(cls, value: Any) -> Any:
        # Path.resolve() raises on a NUL byte; refuse it here, with file:line, like any bad value.
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, Path) and ("\x00" in str(item) or len(str(item)) > 4096):
                raise ValueError("not a usable path (a NUL byte, or longer than 4096 characters)")
        return value


class PlaybookSettings(Strict):
    paths: list[Path] = Field(default_factory=lambda: [Path("playbooks")],
                              description="the project's playbooks: added to the shipped set, or replacing a shipped one by name")
    shipped: bool = Field(True, description="also use the playbooks shipped with runbook (playbooks/)")


class WatchSettings(Strict):
    poll_interval_s: float = Field(0.2, gt=0)
    hang_timeout_s: float = Field(120.0, gt=0, description="ceiling of the hang timeout; in start-up (before a launch's first "
                                  "progress line) the longest the trainer may show no sign of life (output, CPU, I/O)")
    startup_timeout_s: float = Field(14400.0, gt=0, description="the longest a launch may take to its first progress line "
                                     "(preprocessing, model build, checkpoint load, compile), however busy")
    save_timeout_s: float = Field(3600.0, gt=0, description="the longest a checkpoint save (from the last progress line "
                                  "through validation and the save to the next), or the run's first validation, may "
                                  "take, however busy; either is a hang sooner only when it shows no sign of life "
                                  "(output, I/O; CPU too in a validation) for the hang timeout")
    cpu_life_window_s: float = Field(180.0, gt=0, le=86400, description="in start-up and the first validation, CPU "
                                     "time is a sign of life only when the trainer's process tree gained at least "
                                     "cpu_life_min_s CPU-seconds over this many seconds: a deadlocked start-up still "
                                     "ticks (its threads poll), a real one (tokenizing, loading, compiling) works")
    cpu_life_min_s: float = Field(1.0, gt=0, description="CPU-seconds per cpu_life_window_s that count as a sign of life")
    hang_floor_s: float = Field(10.0, gt=0, description="the hang timeout is never shorter than this")
    hang_safety_factor: float = Field(5.0, ge=1, description="hang timeout = factor x the longest gap between progress lines seen")
    grace_period_s: float = Field(10.0, ge=0, description="SIGTERM -> SIGKILL wait when stopping the trainer")
    diagnostics_healthy_steps: int = Field(20, ge=1, description="diagnostic variables a remedy set (set_env "
                                           "diagnostic: NCCL_DEBUG, TORCH_DISTRIBUTED_DEBUG) are lifted once the launch "
                                           "carrying them has trained this many steps")
    no_contract_warning_s: float = Field(120.0, gt=0, description="kind script or hf-trainer: a launch that has "
                                         "printed output for this long without one line of runbook's contract "
                                         "(runbook.sdk: progress, saves) is warned about once: runbook is blind to it")
    first_failure_wait_s: float = Field(30.0, ge=0, le=3600, description="with several ranks under a live launcher: "
                                        "after a rank is gone with no known cause, or a survivor reports a lost peer, "
                                        "the longest to wait for the launcher's own report (torchrun's Root Cause) "
                                        "before deciding; the rank that failed first decides")
    max_recoveries_per_hour: int = Field(12, gt=0, description="global circuit breaker")
    suspect_within_steps: int | None = Field(None, ge=1, le=10**9, description="a divergence (nan, loss spike) whose "
                                             "first bad step comes within this many steps after resuming from checkpoint C "
                                             "marks C suspect (its manifest, `runbook verify`): later resumes and `last` "
                                             "choose an older one; none: the run's save_interval")
    restart_storm_incidents: int = Field(5, ge=2, le=1000, description="the incident that would be the n-th in a row, of "
                                         "two kinds or more, with the run never past the step where the first failed, "
                                         "escalates instead (a cycle through several classes trips no playbook's own limit)")
    quarantine_dir: Path | None = Field(None, description="default: <run_dir>/quarantine")
    cloud_notices: CloudNoticeSettings = Field(default_factory=CloudNoticeSettings,
                                               description="poll AWS/GCP Spot interruption notices (engine/cluster/notice_poller.py)")
    metrics: MetricsSettings = Field(default_factory=MetricsSettings, description="Prometheus endpoint (docs/metrics.md)")
