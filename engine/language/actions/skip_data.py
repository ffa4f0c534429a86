from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionFailed, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core import data_windows
from engine.core.state import StateSnapshot


class SkipDataParams(Params):
    margin: int = Field(0, ge=0, le=10**9, description="steps past the first bad step whose data is skipped too")


def describe(p: SkipDataParams, state: StateSnapshot) -> str:
    return (f"after the rollback: the data of the steps from its resume point to {p.margin} step(s) past the first bad "
            "step is skipped by every later launch (the step counter and lr schedule are kept)")


def apply(p: SkipDataParams, ports: ActionPorts) -> ActionResult:
    """The data window the divergence came from, skipped by every later launch: the positions of the steps from
    the rollback's resume point to `margin` past the first bad step (engine/core/data_windows.py)."""
    bad_step, incident = ports.effects.bad_step, ports.incident
    if bad_step is None:
        raise ActionFailed("skip_data needs a rollback before it in the same playbook (which steps diverged?)")
    config = ports.loaded.config
    first, last = (incident.rollback_target_step or 0) + 1, bad_step + p.margin
    env = ports.trainer.env_in_force()
    try:
        windows = data_windows.parse(env.get(data_windows.ENV))
    except ValueError:
        windows = []   # not runbook's value: replaced by a well-formed one
    merged, (a, b) = data_windows.skip_steps(windows, first, last)
    ports.trainer.set_env({data_windows.ENV: data_windows.format_windows(merged)}, False, incident.id)
    batches, tokens = b - a + 1, (b - a + 1) * config.batch_size * config.model.block_size
    incident.data_skipped = {"steps": [first, last], "positions": [a, b], "batches": batches, "tokens": tokens}
    ports.journal.append("data_skipped", incident=incident.id, **incident.data_skipped)
    text = (f"skipping the data of steps {first}-{last} (positions {a}-{b}: {batches} batches, {tokens:,} tokens) "
            f"in every later launch ({data_windows.ENV}={data_windows.format_windows(merged)}); the step counter "
            "and lr schedule are kept")
    ports.note(text)
    return ActionResult(True, text)


ACTION = ActionDef(
    "skip_data", SkipDataParams,
    "After a rollback in the same incident: later launches skip the data window the divergence came from, from "
    "the rollback's resume point to `margin` steps past the first bad step, without computing it (the field "
    "manual's \"skip the suspicious batch\"). The trainer maps its step to a data position past the skipped "
    "windows (RUNBOOK_DATA_SKIP; runbook.sdk.data_position for a script). Recorded in the incident, the run log "
    "and the journal: steps, positions, batches and tokens; with what the relaunched trainer says it left out "
    "(dataset rows, a loader's samples and chunk file, files and byte offsets: docs/trainers.md).",
    describe, apply, example={"skip_data": {"margin": 10}},
)
