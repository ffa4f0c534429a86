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


# --- another stack's progress lines, read by the live Observer (engine/observe/other_stacks.py) -----------------
PARSED_NAN = ["hf-trainer-pink-6-grad-norm-nan-loss-zero", "hf-trainer-modernbert-233-grad-norm-nan-mid-epoch",
              "hf-trainer-vicuna-lora-rlhf-11-loss-inf-then-nan", "hf-trainer-qwen-vl-finetune-10-grad-norm-nan-first-steps",
              "trl-simpo-35-preference-loss-zero-grad-norm-nan", "keras-relernn-26-loss-nan-epochs",
              "megatron-deepspeed-203-llama2-grad-norm-nan", "mlx-examples-718-phi3-lora-loss-nan",
              "nanogpt-215-loss-nan-after-checkpoint-fp16"]


@pytest.mark.parametrize("case_id", PARSED_NAN)
def test_a_live_runs_nan_in_another_stacks_progress_line_is_the_parsed_loss(tmp_path, case_id):
    """The corpus's live NaN cases of HF, TRL, Keras, Megatron-DeepSpeed, mlx and nanoGPT, printed by a live trainer
    the Observer follows: the NaN is the parsed loss's (not only text), and nan decides while the run still prints."""
    import math

    from engine.trainers.litgpt.adapter import LitGPTAdapter
    from tests.unit.test_other_stacks import watch_live

    snapshot, fired = watch_live(tmp_path, LitGPTAdapter(), CASES[case_id].log.splitlines(), silent_for=1)
    assert fired == "nan" and snapshot.metrics.loss is not None and not math.isfinite(snapshot.metrics.loss)
