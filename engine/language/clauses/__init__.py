"""The match clauses of the playbook language: kind -> clause model, one module per kind.

A clause kind is one module (its spec, observation, test, doc and example); adding one = a module
and a line in CLAUSE_TYPES. Docs, JSON Schema and lint walk this table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Discriminator, Tag

from engine.language.clauses.all_of import AllClause
from engine.language.clauses.any_of import AnyOfClause
from engine.language.clauses.base import Clause, Combinator, Explanation, MatchContext, walk
from engine.language.clauses.checkpoint import CheckpointClause
from engine.language.clauses.disk import DiskClause
from engine.language.clauses.exit import SIGNALS, ExitClause
from engine.language.clauses.expr import ExprClause
from engine.language.clauses.log import LogClause
from engine.language.clauses.metric import MetricClause
from engine.language.clauses.negation import NotClause
from engine.language.clauses.signals import SignalsClause
from engine.language.clauses.stalled import StalledClause
from engine.language.clauses.throughput import ThroughputClause

# In this order in docs/playbooks.md and the JSON Schema.
CLAUSE_TYPES: dict[str, type[Clause]] = {
    clause.kind: clause
    for clause in (
        LogClause, MetricClause, ExitClause, SignalsClause, StalledClause, DiskClause, CheckpointClause, ThroughputClause,
        ExprClause, AllClause, AnyOfClause, NotClause,
    )
}


def _clause_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        keys = [k for k in value if k in CLAUSE_TYPES]
        return keys[0] if len(keys) == 1 and len(value) == 1 else None
    if isinstance(value, Clause):
        return value.kind
    return None


if TYPE_CHECKING:
    AnyClause = Clause   # what a type checker can know of the union built from the table at run time
else:
    AnyClause = Annotated[
        Union[tuple(Annotated[cls, Tag(kind)] for kind, cls in CLAUSE_TYPES.items())],
        Discriminator(
            _clause_tag,
            custom_error_type="clause",
            custom_error_message="a clause is a mapping with exactly one of: " + ", ".join(CLAUSE_TYPES),
        ),
    ]

# Combinators name AnyClause before it exists: complete them now that it does.
for _clause in CLAUSE_TYPES.values():
    if not _clause.__pydantic_complete__:
        _clause.model_rebuild(_types_namespace={"AnyClause": AnyClause})

__all__ = [
    "CLAUSE_TYPES", "AnyClause", "Clause", "Combinator", "Explanation", "MatchContext", "SIGNALS", "walk",
    *(cls.__name__ for cls in CLAUSE_TYPES.values()),
]
