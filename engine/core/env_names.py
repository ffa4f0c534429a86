"""Environment variables runbook passes to the trainer: names and values by POSIX rules.

A name is `[A-Za-z_][A-Za-z0-9_]*` (POSIX portable names; `=` would split it, an empty or NUL name
makes exec fail), a value holds no NUL byte (the C string ends there; Python's exec refuses it).
Checked where a variable enters: the run config's `trainer.env`, a playbook's `set_env: {vars: ...}`
at load and again after templating, and a journaled `env` entry at replay (an entry that fails is
reported and skipped, never handed to a launch that would fail on it every time).
"""

from __future__ import annotations

import re

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_NAME = 255
MAX_VALUE = 128 * 1024    # Linux MAX_ARG_STRLEN: one "NAME=value" string exec accepts


def env_problem(name: object, value: object) -> str | None:
    """Why NAME=value cannot be passed to a process, as one phrase, or None."""
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > MAX_NAME:
        return (f"{str(name)[:60]!r} is not an environment variable name (letters, digits and _, "
                f"not starting with a digit, at most {MAX_NAME} characters)")
    if not isinstance(value, str):
        return f"{name}: the value must be text, not {type(value).__name__}"
    if "\x00" in value:
        return f"{name}: the value holds a NUL byte"
    if len(name) + 1 + len(value.encode("utf-8", "surrogatepass")) >= MAX_VALUE:
        return f"{name}: the value is longer than {MAX_VALUE // 1024} KiB"
    return None


def check_env(variables: dict) -> dict:
    """`variables`, or a ValueError naming the first variable that cannot be passed (pydantic validators)."""
    for name, value in variables.items():
        if problem := env_problem(name, value):
            raise ValueError(problem)
    return variables
