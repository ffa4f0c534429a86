"""What every action is: a name, a pydantic params model, a pure `describe`, an effectful `apply`.

`describe` sees only plain data (params and the snapshot) and is what dry-run and replay print;
`apply(p, ports)` does the action's effect itself through its typed ports, the ActionPorts
(engine/language/actions/ports.py): an action with an effect is one module and its test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from engine.core.state import StateSnapshot
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


P = TypeVar("P", bound=Params)


@dataclass(frozen=True)
class ActionDef(Generic[P]):
    """One action, typed by its params model: `describe` and `apply` take exactly the model `params` validates."""

    name: str
    params: type[P]
    doc: str
    describe: Callable[[P, StateSnapshot], str]
    apply: Callable[[P, ActionPorts], ActionResult]
    example: dict = field(default_factory=dict)
