"""The action registry: name -> ActionDef, one module per action (an explicit table, kept in sync by a test)."""

from __future__ import annotations

from typing import Any

from engine.language.actions import (
    advise_save_interval,
    compress_logs,
    diagnose_slowness,
    escalate,
    notify,
    prune_checkpoints,
    record,
    resume,
    rollback,
    run,
    scan_data,
    set_env,
    set_hyperparameters,
    skip_data,
    stop,
    verify_checkpoints,
    wait,
    wait_for,
)
from engine.language.actions.base import ActionDef, ActionFailed, ActionResult, Params
from engine.language.actions.ports import ActionPorts, IncidentEffects
from engine.expr.expressions import compile_expression, compile_template, is_expression, is_template

REGISTRY: dict[str, ActionDef[Any]] = {   # each its own params model: Any only across the registry
    module.ACTION.name: module.ACTION
    for module in (
        resume, rollback, set_hyperparameters, prune_checkpoints, compress_logs, set_env, scan_data, skip_data,
        verify_checkpoints, notify, record, stop, wait, wait_for, escalate, run, diagnose_slowness,
        advise_save_interval,
    )
}


def validate_params(verb: str, params: dict[str, Any]) -> None:
    """Load-time check: literals are validated by the params model, expressions are compiled.

    A field given as "{{ ... }}" is checked for syntax and sandbox rules here and for its type when
    evaluated at plan time (its value depends on the live state).
    """
    model = REGISTRY[verb].params
    literal = {}
    for key, value in params.items():
        if is_expression(value):
            compile_expression(value)
            if key not in model.model_fields and not any(f.alias == key for f in model.model_fields.values()):
                raise ValueError(f"{verb}: unknown parameter '{key}'")
        else:
            if is_template(value):
                compile_template(value)  # syntax and sandbox rules now; rendered at plan time
            literal[key] = value
    computed = {key for key, value in params.items() if is_expression(value)}
    try:
        model.model_validate(literal, context={"computed": computed})
    except Exception as err:
        # Missing fields are fine when an expression supplies them.
        from pydantic import ValidationError

        if not isinstance(err, ValidationError):
            raise
        real = [e for e in err.errors() if not (e["type"] == "missing" and e["loc"] and e["loc"][0] in params)]
        if real:
            first = real[0]
            where = ".".join(str(p) for p in first["loc"])
            reason = "unknown parameter" if first["type"] == "extra_forbid" or first["type"] == "extra_forbidden" else first["msg"]
            reason = reason.removeprefix("Value error, ")
            raise ValueError(f"{verb}: {where}: {reason}" if where else f"{verb}: {reason}") from None


__all__ = ["REGISTRY", "ActionPorts", "ActionDef", "ActionFailed", "ActionResult", "IncidentEffects", "Params",
           "validate_params"]
