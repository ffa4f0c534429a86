from __future__ import annotations

from engine.language.actions.base import ActionDef, ActionResult, Params


class VerifyParams(Params):
    pass


def describe(p: VerifyParams, state) -> str:
    return "verify every checkpoint (zip CRCs, side files, manifest) and quarantine the corrupt ones"


def apply(p: VerifyParams, rt) -> ActionResult:
    return ActionResult(True, rt.verify_all())


ACTION = ActionDef(
    "verify_checkpoints", VerifyParams,
    "Verify every checkpoint; quarantine corrupt or partial ones outside out_dir (never delete).",
    describe, apply, example={"verify_checkpoints": {}},
)
