from __future__ import annotations

import subprocess

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionFailed, ActionResult, Params


class RunParams(Params):
    argv: list[str] = Field(min_length=1, description="program and arguments; never passed through a shell")
    timeout: float = Field(60.0, gt=0, le=3600)


def describe(p: RunParams, state) -> str:
    return f"run {p.argv!r} (no shell, timeout {p.timeout:g} s)"


def apply(p: RunParams, rt) -> ActionResult:
    try:
        done = subprocess.run(p.argv, capture_output=True, text=True, timeout=p.timeout, cwd=rt.loaded.project_dir)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ActionFailed(f"{p.argv[0]}: {err}") from None
    output = (done.stdout + done.stderr)[-2000:]
    if done.returncode != 0:
        raise ActionFailed(f"{p.argv[0]} exited {done.returncode}: {output.strip()[-300:]}")
    return ActionResult(True, f"{p.argv[0]} exited 0", {"output": output})


ACTION = ActionDef(
    "run", RunParams, "Run an external command given as an argument list (never through a shell).",
    describe, apply, example={"run": {"argv": ["nvidia-smi"], "timeout": 10}},
)
