"""The `run` action: an external command as an argument list (never through a shell), bounded.

engine/core/bounded_command.py does the bounding: output read in chunks with only its first and last
32 KiB kept, the timeout enforced on the command's whole process group (SIGTERM, then SIGKILL), bytes
decoded with errors="replace", and processes it leaves running killed instead of waited for. The kept
output goes into the incident's notes (the record says how much was left out); the summary stays one line.
"""

from __future__ import annotations

from pydantic import Field

from engine.core.bounded_command import KEEP_BYTES, CommandResult, run_bounded
from engine.language.actions.base import ActionDef, ActionFailed, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot

SUMMARY_TAIL = 300   # characters of output in a failure's one-line summary


class RunParams(Params):
    argv: list[str] = Field(min_length=1, description="program and arguments; never passed through a shell")
    timeout: float = Field(60.0, gt=0, le=3600, description="seconds; then the command's whole process group is "
                           "stopped (SIGTERM, then SIGKILL)")


def describe(p: RunParams, state: StateSnapshot) -> str:
    return f"run {p.argv!r} (no shell, timeout {p.timeout:g} s)"


def output_note(argv0: str, done: CommandResult) -> str:
    """PURE. What the record keeps of the output, saying whether (and how much) was left out."""
    if done.truncated:
        size = (f"{done.output_bytes:,} bytes, truncated: the first and last {KEEP_BYTES // 2 // 1024} KiB kept, "
                f"{done.output_bytes - done.kept_bytes:,} bytes left out")
    else:
        size = f"{done.output_bytes:,} bytes"
    return f"run {argv0}: output ({size}):\n{done.output}"


def apply(p: RunParams, ports: ActionPorts) -> ActionResult:
    argv0 = p.argv[0]
    try:
        done = run_bounded(p.argv, p.timeout, cwd=ports.loaded.project_dir)
    except OSError as err:
        raise ActionFailed(f"{argv0}: {err}") from None
    if done.output_bytes:
        ports.note(output_note(argv0, done))
    data = {"output": done.output, "output_bytes": done.output_bytes, "output_truncated": done.truncated,
            "killed_left_behind": done.killed_left_behind}
    tail = " ".join(done.output.split())[-SUMMARY_TAIL:]
    if done.timed_out:
        raise ActionFailed(f"{argv0} did not finish within {p.timeout:g} s: its process group was stopped "
                           f"(SIGTERM, then SIGKILL){': ' + tail if tail else ''}")
    left = (f"; it left {done.killed_left_behind} process(es) of its own running in the background: killed them"
            if done.killed_left_behind else "")
    if done.returncode != 0:
        raise ActionFailed(f"{argv0} exited {done.returncode}{left}{': ' + tail if tail else ''}")
    return ActionResult(True, f"{argv0} exited 0{left}", data)


ACTION = ActionDef(
    "run", RunParams, "Run an external command given as an argument list (never through a shell). Its output "
    "(the first and last 32 KiB) goes into the incident's notes; processes it leaves running are killed.",
    describe, apply, example={"run": {"argv": ["nvidia-smi"], "timeout": 10}},
)
