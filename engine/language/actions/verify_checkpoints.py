from __future__ import annotations

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class VerifyParams(Params):
    pass


def describe(p: VerifyParams, state: StateSnapshot) -> str:
    return "verify every checkpoint (zip CRCs, side files, manifest) and quarantine the corrupt ones"


def apply(p: VerifyParams, ports: ActionPorts) -> ActionResult:
    bad = ports.checkpoints.refresh(quarantine_corrupt=True, force=True)
    ports.effects.verified_all = True   # a resume after it in this incident need not read them all again
    return ActionResult(True, f"quarantined {len(bad)} corrupt checkpoint(s): {', '.join(bad)}" if bad
                        else "all checkpoints verified")


ACTION = ActionDef(
    "verify_checkpoints", VerifyParams,
    "Verify every checkpoint; quarantine corrupt or partial ones outside out_dir (never delete).",
    describe, apply, example={"verify_checkpoints": {}},
)
