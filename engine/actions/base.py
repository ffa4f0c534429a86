"""What every action is: a name, a pydantic params model, a pure `describe`, an effectful `apply`.

`describe` sees only plain data (params and the snapshot) and is what dry-run and replay print;
`apply` gets the Runtime, the one object through which actions touch processes and files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


@dataclass
class ActionResult:
    ok: bool
    summary: str
    data: dict = field(default_factory=dict)


class ActionFailed(RuntimeError):
    """Raised by an action's apply; the runner turns it into a failed ActionResult."""


class Runtime(Protocol):
    """The effectful operations the supervisor lends to actions (see engine/runtime.py)."""

    loaded: Any
    state: Any

    def stop_trainer(self, reason: str) -> str: ...
    def resume(self, source: str, step: int | None = None) -> str: ...
    def update_config(self, updates: dict) -> str: ...
    def notify(self, text: str) -> None: ...
    def note(self, text: str) -> None: ...
    def escalate(self, reason: str) -> None: ...


@dataclass(frozen=True)
class ActionDef:
    name: str
    params: type[Params]
    doc: str
    describe: Callable[[Any, Any], str]
    apply: Callable[[Any, Runtime], ActionResult]
    example: dict = field(default_factory=dict)
