"""What every action is: a name, a pydantic params model, a pure `describe`, an effectful `apply`.

`describe` sees only plain data (params and the snapshot) and is what dry-run and replay print;
`apply(p, ports)` does the action's effect itself through its typed ports, the ActionPorts
(engine/language/actions/ports.py): an action with an effect is one module and its test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from engine.language.actions.ports import ActionPorts


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


@dataclass
class ActionResult:
    ok: bool
    summary: str
    data: dict = field(default_factory=dict)


class ActionFailed(RuntimeError):
    """Raised by an action's apply; the runner turns it into a failed ActionResult."""


@dataclass(frozen=True)
class ActionDef:
    name: str
    params: type[Params]
    doc: str
    describe: Callable[[Any, Any], str]
    apply: Callable[[Any, ActionPorts], ActionResult]
    example: dict = field(default_factory=dict)
