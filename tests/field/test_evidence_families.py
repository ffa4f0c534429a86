"""Issue 47's evidence families, each through the watcher's own path (tests/field/harness.py): an ended
trainer through `runbook watch --dry-run` on a run folder holding the case's log, a live one through the
playbooks' snapshot path. The logs are the field corpus's real lines, named by case id.
"""

from __future__ import annotations

import pytest

from tests.field.harness import judge_ended, load_cases, make_field_project

CASES = {c.id: c for c in load_cases()}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return make_field_project(tmp_path_factory.mktemp("families"))


# --- every rank failed with one error before the first step (engine/observe/same_start_error.py) --------------
def test_every_rank_failing_with_one_error_before_the_first_step_goes_to_a_human(config):
    """deepspeed-autopoison-6: each rank's traceback ends in the same missing cpu_adam.so (a destructor's complaint after)."""
    verdict = judge_ended(config, CASES["deepspeed-autopoison-6-cpu-adam-so-missing-every-rank"])
    assert verdict.playbook == "same-error-at-start" and verdict.escalated, verdict


def test_one_traceback_in_the_log_is_no_evidence_of_every_rank(config):
    """deepspeed-1846: the note says two ranks failed alike, but the excerpt holds one ImportError line."""
    verdict = judge_ended(config, CASES["deepspeed-1846-cpu-adam-undefined-symbol-curand"])
    assert verdict.playbook != "same-error-at-start" and verdict.escalated, verdict


def test_every_rank_timing_out_at_the_same_barrier_is_still_restarted_as_a_collective_timeout(config):
    """megatron-deepspeed-338: one error on every rank before the first step, but its words name a class a restart cures."""
    verdict = judge_ended(config, CASES["megatron-deepspeed-338-store-barrier-two-nodes"])
    assert verdict.playbook == "collective-timeout" and verdict.recovered, verdict


# --- one process dying before its first step of an error no class claims: never restarted ---------------------
def test_a_single_process_dying_before_its_first_step_of_a_code_error_is_escalated_at_once(config):
    """litgpt-1413 (Lightning-AI/litgpt#1413): IsADirectoryError before any step, one process. unknown-crash's
    fallback escalates it the first time, so no second or third try happens (the same holds for every
    single-process exception no restartable class names; a restartable class's own limits bound the rest)."""
    verdict = judge_ended(config, CASES["litgpt-1413-textfiles-is-a-directory"])
    assert verdict.escalated and not verdict.recovered, verdict
