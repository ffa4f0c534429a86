"""A text match never overrides finite parsed metrics (issue 35): NaN needs a non-finite metric, a non-finite
exception, or a trainer that died of an error.

The hostile probe: one free-text line `... loss = nan ...` from a healthy trainer whose parsed loss is finite
stopped it, rolled it back and halved the lr in the user's config; six such lines took lr 0.003 to 2.9e-06,
quarantined 7 checkpoints and escalated. Here the same line reaches the real matcher on snapshots (the
shipped playbook set) and a real `runbook watch` of a real trainer process.
"""

from __future__ import annotations

import json
import math

import pytest
from ruamel.yaml import YAML

from engine.core.config import RunConfig
from engine.language.matcher import AttemptHistory, MatchMemory, decide
from engine.language.playbook_set import load_set
from engine.language.playbook_testing import build_snapshots
from tests.runs.test_toy_trainer import STEPS, final_state, make_toy_project, run_toy
from tests.unit.nan_free_text_trainer import COUNT, FREE_TEXT

SHIPPED = load_set([], True)[0]
NANOGPT_NAN = "2023-03-22 09:32:52 iter 3010: loss nan, time 1019.95ms, mfu 14.12%"


def first_decision(observations: list[dict]):
    config = RunConfig()
    memory, history = MatchMemory(), AttemptHistory()
    for snapshot in build_snapshots(observations, config):
        outcome = decide(snapshot, config, SHIPPED, memory, history)
        memory = outcome.memory
        if outcome.decision is not None:
            return outcome.decision
    return None


def test_a_free_text_nan_line_from_a_healthy_trainer_with_finite_parsed_loss_decides_nothing():
    healthy = [{"trainer": {"alive": True}, "metrics": {"step": 30 + i, "loss": 2.4 - 0.01 * i},
                "new_lines": [FREE_TEXT]} for i in range(COUNT)]
    assert first_decision(healthy) is None


def test_the_same_line_is_a_nan_once_the_trainer_died_of_an_error():
    died = [{"trainer": {"alive": False, "exit_code": 1}, "metrics": {"step": 30, "loss": 2.4},
             "tail": ["step 31 | loss = nan | grad_norm = nan", "SystemExit: 1"]}]
    decision = first_decision(died)
    assert decision is not None and decision.playbook.name == "nan"


def test_the_same_line_is_a_nan_from_a_trainer_whose_progress_runbook_does_not_parse():
    # No parsed loss at all: the text is the run's only metric (nanoGPT's own progress line).
    decision = first_decision([{"trainer": {"alive": True}, "tail": [NANOGPT_NAN]}])
    assert decision is not None and decision.playbook.name == "nan"


def test_a_non_finite_parsed_loss_is_a_nan_whatever_the_text_says():
    decision = first_decision([{"trainer": {"alive": True}, "metrics": {"step": 5, "loss": math.nan}}])
    assert decision is not None and decision.playbook.name == "nan"


@pytest.mark.slow
def test_a_real_watched_run_printing_free_text_nan_lines_is_left_untouched(tmp_path):
    project = make_toy_project(tmp_path / "project")
    project.set(trainer={"kind": "python:tests.unit.nan_free_text_trainer:FreeTextNanToyAdapter"}, lr=0.003)
    run_toy(project, timeout=90)
    log = "".join(p.read_text(errors="replace") for p in sorted((project.run_dir / "logs").glob("*.log")))
    assert log.count(FREE_TEXT) == COUNT, log[-2000:]          # the lines did reach the watcher's log
    assert project.incidents(include_slow=True) == [], json.dumps(project.incidents(include_slow=True))[:2000]
    assert YAML(typ="safe").load(project.config.read_text())["lr"] == 0.003   # untouched in the user's config
    assert final_state(project)["step"] == STEPS               # one launch, run to the end
    assert not list(project.out_dir.rglob("quarantine*"))      # no checkpoint quarantined
