"""engine/checkpoints/rollback.py: the rollback's summary names each step once, grouped by its reason."""

from __future__ import annotations

from engine.checkpoints.rollback import RollbackResult


def test_the_summary_groups_steps_by_everything_after_the_first_comma_of_a_within_reason():
    result = RollbackResult(quarantined={
        16: "saved at step 16, within 4 steps of the bad step 19, after a loss spike",
        18: "saved at step 18, within 4 steps of the bad step 19, after a loss spike",
        8: "non-finite weights in head.bias, head.weight",
    })
    assert result.summary() == ("quarantined 3 checkpoint(s): step 8 (non-finite weights in head.bias, head.weight), "
                                "steps 16, 18 (within 4 steps of the bad step 19, after a loss spike)")
    assert tuple(result) == (3, None)


def test_a_rollback_that_moved_nothing_says_so_and_names_the_unscanned():
    result = RollbackResult(unreadable={12: "state.pt: not a zip"})
    assert result.summary() == "quarantined 0 checkpoint(s); kept step 12 unscanned (state.pt: not a zip)"
