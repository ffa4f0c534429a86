"""JSON Schema of the playbook format, for editors (yaml-language-server) and other tools.

Built from the same pydantic models that validate playbooks. Two things pydantic cannot see are
added here: an action is written `- <verb>: {params}` (one schema per registered verb, from
engine.actions.REGISTRY), and some values may be given in another spelling (a duration such as
"5m"; a computed param written as "{{ ... }}").
"""

from __future__ import annotations

from typing import Any

from engine.actions import REGISTRY
from engine.playbook import Playbook

EXPRESSION = {"type": "string", "pattern": r"^\s*\{\{.*\}\}\s*$", "description": "a value computed by an expression"}
DURATION = {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$", "description": "a duration: 30s, 5m, 1h"}
# Fields whose validators accept a duration string (engine.playbook.parse_duration); a test checks them.
DURATION_FIELDS = {("Persistence", "seconds"), ("Limits", "window"), ("Limits", "cooldown")}
DURATION_PARAMS = {("wait", "seconds")}
_HOISTED = ("title", "description", "default")


def _either(prop: dict, *alternatives: dict) -> dict:
    """`prop` or one of `alternatives`, keeping the documentation outside for editors' hovers."""
    inner = {k: v for k, v in prop.items() if k not in _HOISTED}
    outer = {k: prop[k] for k in _HOISTED if k in prop}
    return {**outer, "anyOf": [inner, *alternatives]}


def _verb_schema(verb: str, defs: dict) -> dict:
    definition = REGISTRY[verb]
    params = definition.params.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
    defs.update(params.pop("$defs", {}))
    params["properties"] = {
        key: _either(prop, EXPRESSION, *([DURATION] if (verb, key) in DURATION_PARAMS else []))
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


def playbook_schema() -> dict[str, Any]:
    schema = Playbook.model_json_schema(by_alias=True)
    defs = schema["$defs"]
    for verb in sorted(REGISTRY):
        defs[f"action_{verb}"] = _verb_schema(verb, defs)
    defs["ActionStep"] = {
        "description": "one action: `- <verb>: {params}` with optional `if:` and `on_failure:`",
        "oneOf": [{"$ref": f"#/$defs/action_{verb}"} for verb in sorted(REGISTRY)],
    }
    for name, prop in DURATION_FIELDS:
        properties = defs[name]["properties"]
        properties[prop] = _either(properties[prop], DURATION)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
