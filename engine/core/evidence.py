"""Evidence beyond the log text, part of every snapshot (`state.evidence`): what the observer measured
of the machine around a failure (engine/observe/evidence.py gathers it).

Each field is None when it could not be learnt (no cgroup counter readable, no resume file, an old
snapshot), so a playbook says `== true` / `== false` and an unknown value matches neither.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Evidence(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    out_dir_free_bytes: int | None = Field(None, description="free bytes on out_dir's filesystem")
    run_dir_free_bytes: int | None = Field(None, description="free bytes on run_dir's filesystem (the trainer's log, the journal)")
    disk_nearly_full: bool | None = Field(
        None, description="out_dir's or run_dir's filesystem has less free than the larger of 1% of it, "
                          "min(64 MiB, 5% of it) and the newest checkpoint's size (a save would not fit)")
    oom_killed: bool | None = Field(
        None, description="the trainer has exited and the kernel OOM killer killed a process of its cgroup during "
                          "this launch (memory.events / memory.oom_control `oom_kill` rose) or the kernel log names "
                          "its pid; false when a readable counter or log says not; null while alive or unknown")
    oom_detail: str | None = Field(None, description="where oom_killed was learnt (the counter and its values, a kernel log line)")
    resume_checkpoint: str | None = Field(None, description="the file this launch resumed from, if any")
    resume_checkpoint_corrupt: bool | None = Field(
        None, description="after a non-zero exit: the checkpoint this launch resumed from, verified afresh "
                          "(zip CRCs, side files, manifest), is corrupt (true) or intact (false); null when there "
                          "is none, the trainer is alive, or it is no checkpoint of out_dir")
    resume_checkpoint_problem: str | None = Field(None, description="what that verification found wrong")
