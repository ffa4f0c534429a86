"""JSON Schema of the playbook format, for editors (yaml-language-server) and other tools.

Built from the same pydantic models that validate playbooks, walking the two registries: each
clause kind of engine.language.clauses.CLAUSE_TYPES gets its name and doc (editors show them on hover); an
action is written `- <verb>: {params}`, which pydantic cannot see, so each verb of
engine.language.actions.REGISTRY gets its own schema. Values that may be given in another spelling are
widened here too (a duration such as "5m"; a computed param written as "{{ ... }}").
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from engine.language.actions import REGISTRY
from engine.language.clauses import CLAUSE_TYPES
from engine.language.playbook import Limits, Persistence, Playbook

EXPRESSION = {"type": "string", "pattern": r"^\s*\{\{.*\}\}\s*$", "description": "a value computed by an expression"}
DURATION = {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$", "description": "a duration: 30s, 5m, 1h"}
_HOISTED = ("title", "description", "default")


def duration_fields(model: type[BaseModel]) -> set[str]:
    """Numeric fields (by YAML key) whose validator also takes a duration such as "5m".

    Found by asking the model itself (engine.language.playbook.parse_duration is called by a before-validator,
    which the JSON Schema pydantic writes cannot show), so a new action's durations are never missed.
    """
    found = set()
    for name, info in model.model_fields.items():
        key = info.alias or name
        kinds = set(typing.get_args(info.annotation)) - {type(None)} or {info.annotation}
        if not kinds <= {int, float}:
            continue
        try:
            model.model_validate({key: "5m"})
        except ValidationError as err:
            if any(e["loc"][:1] == (key,) for e in err.errors()):
                continue
        found.add(key)
    return found


def _either(prop: dict, *alternatives: dict) -> dict:
    """`prop` or one of `alternatives`, keeping the documentation outside for editors' hovers."""
    inner = {k: v for k, v in prop.items() if k not in _HOISTED}
    outer = {k: prop[k] for k in _HOISTED if k in prop}
    return {**outer, "anyOf": [inner, *alternatives]}


def _verb_schema(verb: str, defs: dict) -> dict:
    definition = REGISTRY[verb]
    params = definition.params.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
    defs.update(params.pop("$defs", {}))
    durations = duration_fields(definition.params)
    params["properties"] = {
        key: _either(prop, EXPRESSION, *([DURATION] if key in durations else []))
        for key, prop in params.get("properties", {}).items()
    }
    params.pop("title", None)
    params.pop("description", None)
    if not params.get("required"):
        params = {"anyOf": [params, {"type": "null"}]}  # `- stop:` with nothing after it
    return {
        "type": "object",
        "title": verb,
        "description": definition.doc,
        "properties": {
            verb: params,
            "if": {"type": "string", "description": "guard: the step runs only when this expression is true"},
            "on_failure": {"enum": ["continue", "abort", "escalate"], "default": "abort",
                           "description": "what a failure of this step does"},
        },
        "required": [verb],
        "additionalProperties": False,
    }


def _document_clauses(defs: dict) -> None:
    for kind, clause in CLAUSE_TYPES.items():
        definition = defs[clause.__name__]
        definition["title"] = kind
        definition["description"] = clause.doc


def playbook_schema() -> dict[str, Any]:
    schema = Playbook.model_json_schema(by_alias=True)
    defs = schema["$defs"]
    _document_clauses(defs)
    for verb in sorted(REGISTRY):
        defs[f"action_{verb}"] = _verb_schema(verb, defs)
    defs["ActionStep"] = {
        "description": "one action: `- <verb>: {params}` with optional `if:` and `on_failure:`",
        "oneOf": [{"$ref": f"#/$defs/action_{verb}"} for verb in sorted(REGISTRY)],
    }
    for model in (Persistence, Limits):
        properties = defs[model.__name__]["properties"]
        for key in duration_fields(model):
            properties[key] = _either(properties[key], DURATION)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
