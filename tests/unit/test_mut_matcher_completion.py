"""A completed run is judged by the playbooks that name exit code 0 alone (issue 48 item 4: judging_completion in
engine/language/matcher.py); the real run is tests/runs/test_diverged_at_end.py."""

from __future__ import annotations

from engine.core.config import RunConfig
from engine.language.matcher import AttemptHistory, MatchMemory, decide, judging_completion
from engine.language.playbook_set import load_set
from engine.language.playbook_testing import build_snapshots

SHIPPED = load_set([], True)[0]


def test_only_the_playbooks_that_name_exit_code_0_judge_a_completed_run():
    assert sorted(p.name for p in judging_completion(SHIPPED)) == ["diverged-at-end", "missing-final"]


def test_a_spike_in_a_finished_run_s_last_lines_is_judged_by_diverged_at_end_not_rolled_back():
    # The same snapshot decided over the whole set would be loss-spike's rollback of a finished run.
    ended = [{"trainer": {"alive": False, "exit_code": 0},
              "metrics": {"step": 40, "loss": 14.0, "loss_best_median": 2.0, "loss_early_median": 6.0,
                          "loss_history": [2.1, 14.0, 14.0, 14.0, 14.0]}}]
    config = RunConfig()
    [snapshot] = build_snapshots(ended, config)
    everything = decide(snapshot, config, SHIPPED, MatchMemory(), AttemptHistory()).decision
    completion = decide(snapshot, config, judging_completion(SHIPPED), MatchMemory(), AttemptHistory()).decision
    assert everything is not None and everything.playbook.name == "loss-spike"
    assert completion is not None and completion.playbook.name == "diverged-at-end"
