"""A planned step as it is stored in an incident record, written against the mutants
benchmarks/bench_mutation.py found alive (engine/language/planner.py)."""

from __future__ import annotations

from engine.language.planner import PlannedStep, plan
from tests.language.test_playbook_language import CONFIG, snap
from engine.language.playbook import build_playbook


def test_a_stored_step_keeps_its_params_by_their_yaml_names_and_a_skipped_one_none():
    rule = build_playbook({"name": "rule", "description": "a rule", "match": {"exit": {"nonzero": True}},
                           "actions": [{"resume": {"from": "newest_verified"}},
                                       {"record": {"note": "never"}, "if": "attempt > 5"}]})
    resume, skipped = plan(rule, snap(), CONFIG)
    stored = resume.to_dict()
    assert stored["params"] == {"from": "newest_verified", "step": None}   # the alias, as the playbook writes it
    assert stored["verb"] == "resume" and stored["index"] == 0 and stored["skipped"] is None
    assert PlannedStep.from_dict(stored).params == resume.params
    assert skipped.to_dict()["params"] is None and skipped.to_dict()["skipped"] == "if: attempt > 5 is false"
