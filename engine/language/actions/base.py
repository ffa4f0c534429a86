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
    """Everything an action may use: the effects the watcher lends to one incident (engine/watch/runtime.py).
    An action reaches nothing else; tests/unit/test_actions_runtime.py keeps this list and the actions in step."""

    # read-only: properties or plain attributes both fit
    @property
    def loaded(self) -> Any: ...     # the run config in force (engine/core/config.LoadedConfig)
    @property
    def state(self) -> Any: ...      # the snapshot the playbook matched (engine/core/state.StateSnapshot)
    @property
    def trainer(self) -> Any: ...    # the trainer process, read-only (a diagnosis samples it)

    # the trainer
    def stop_trainer(self, reason: str) -> str: ...
    def resume(self, source: str, step: int | None = None) -> str: ...
    # checkpoints, disk, data
    def verify_all(self) -> str: ...
    def rollback(self, bad_step: int | None, steps: int, scan_nonfinite: bool) -> str: ...
    def prune(self, keep_last_k: int | None, keep_best: bool, remove_partial: bool) -> str: ...
    def compress_logs(self, min_bytes: int) -> str: ...
    def scan_data(self, max_tokens_per_line: int) -> str: ...
    def skip_data(self, margin: int) -> str: ...
    def wait_for(self, condition: Any, timeout: float) -> tuple[bool, float]: ...
    # configuration
    def update_config(self, updates: dict) -> str: ...
    def set_env(self, variables: dict, diagnostic: bool = False) -> str: ...
    # the record and people
    def record_diagnosis(self, report: dict) -> None: ...
    def save_interval_advice(self) -> str | None: ...
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
