"""Names in playbook expressions checked against the typed models they read, at load time.

`state` is a StateSnapshot and `config` a RunConfig: pydantic models whose fields are known before any
run. A typo on one (`state.trainer.alvie`) is undefined at every observation, so its condition fails
closed for ever and the playbook can never fire; the sandbox cannot tell a typo from a missing value,
but the model can. Only chains of typed models are checked: below a dict, a list, a property or
`Any`, what an expression may read is the data's, not the model's; below `config.trainer` and
`config.model`, the names are those of the run's trainer (a settings model per trainer.kind).
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Iterator

from jinja2 import nodes
from pydantic import BaseModel

from engine.core.config import ModelSection, RunConfig, TrainerSettings
from engine.core.state import StateSnapshot
from engine.expr.expressions import is_expression, is_template, syntax_tree
from engine.expr.sandbox import model_info
from engine.language.clauses import walk

if typing.TYPE_CHECKING:
    from engine.language.playbook import Playbook

ROOTS: dict[str, type[BaseModel]] = {"state": StateSnapshot, "config": RunConfig}


def expressions(playbook: Playbook) -> Iterator[tuple[tuple, str, str]]:
    """(YAML location, role, source) of every expression of a playbook: conditions (the match's
    clauses, each step's `if`, a wait_for's condition), computed params ("{{ ... }}") and templates."""
    for loc, clause in walk(playbook.match, ("match",)):
        for place, source in clause.expressions():
            yield loc + place, "condition", source
    for index, step in enumerate(playbook.actions):
        if step.condition is not None:
            yield ("actions", index, "if"), "condition", step.condition
        for key, value in step.params.items():
            if not isinstance(value, str):
                continue
            if step.verb == "wait_for" and key == "condition":
                yield ("actions", index, step.verb, key), "condition", value
            elif is_expression(value):
                yield ("actions", index, step.verb, key), "value", value
            elif is_template(value):
                yield ("actions", index, step.verb, key), "template", value


def unknown_names(source: str, role: str) -> list[str]:
    """PURE. One sentence per attribute of a typed model that the model does not have, with the
    closest name it does have: "state.trainer.alvie: TrainerStatus has no 'alvie' (did you mean alive?)".
    A source that does not parse yields nothing here (the expression compiler reports it)."""
    try:
        tree = syntax_tree(source, template=role == "template")
    except Exception:  # noqa: BLE001 - a syntax error is the compiler's to report, with its own words
        return []
    stored = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    roots = {name: model for name, model in ROOTS.items() if name not in stored}   # `{% set state = ... %}` shadows
    found: dict[str, str] = {}
    for node in (tree, *tree.find_all(nodes.Node)):
        if isinstance(node, (nodes.Getattr, nodes.Getitem)):
            _resolve(node, roots, found)
    return list(found.values())


def _resolve(node: nodes.Node, roots: dict, found: dict) -> tuple[str, type[BaseModel]] | None:
    """(the chain's text, the model it yields) for a chain of typed attributes, else None."""
    if isinstance(node, nodes.Name):
        return (node.name, roots[node.name]) if node.ctx == "load" and node.name in roots else None
    if isinstance(node, nodes.Getattr):
        attr = node.attr
    elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
        attr = node.arg.value
    else:
        return None
    parent = _resolve(node.node, roots, found)
    if parent is None:
        return None
    chain, model = parent
    info = model_info(model)
    assert info is not None   # model is a pydantic model: a root or a field's model
    known = sorted(info.fields | info.properties)
    if attr not in known:
        close = difflib.get_close_matches(attr, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else f"; it has: {', '.join(known)}"
        found.setdefault(f"{chain}.{attr}", f"{chain}.{attr}: {model.__name__} has no '{attr}'{hint}")
        return None
    field = model.model_fields.get(attr)
    inner = _model_of(field.annotation) if field is not None else None
    return (f"{chain}.{attr}", inner) if inner is not None else None


# Sections each trainer extends with a model of its own (trainer.kind's settings, engine/trainers/registry.py):
# which names they have depends on the run, not on the playbook, so they are not checked.
OPEN_SECTIONS = (TrainerSettings, ModelSection)


def _model_of(annotation: object) -> type[BaseModel] | None:
    """The pydantic model a field holds (`Metrics`, `Metrics | None`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return None if issubclass(annotation, OPEN_SECTIONS) else annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(models) == 1:
            return _model_of(models[0])
    return None


def playbook_name_problems(playbook: Playbook) -> list[tuple[tuple, str]]:
    """(YAML location, sentence) for every unknown typed name in the playbook's expressions."""
    return [(loc, problem) for loc, role, source in expressions(playbook) for problem in unknown_names(source, role)]
