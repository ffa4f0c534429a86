"""engine/language/drafting.py without a run: the pattern a signature gives, the closest known class and its
reason, the refusals, and tests generated from records (the real-run story: tests/language/test_draft_playbook.py)."""

from __future__ import annotations

import pytest

from engine.language.drafting import NotDraftable, draft_playbook, pattern_for, why_not_draftable
from engine.language.drafting_checks import as_yaml, changed_decisions, with_pinned_actions
from engine.records.incident import Incident
from engine.watch.incident_runner import signature_fields
from engine.expr.patterns import compile_pattern
from engine.language.playbook_set import load_set
from engine.core.config import RunConfig
from engine.records.signature import signature_of

SHIPPED = load_set([], True)[0]


def record(number: int, tail: list[str], *, outcome="escalated", playbook="unknown-crash", code=1, run=None, **more) -> dict:
    snapshot = {"time": 100.0 + number, "trainer": {"alive": False, "exit_code": code,
                                                     "signal": "SIGTERM" if code == -15 else None},
                "metrics": {"step": 12}, "tail": tail}
    data = Incident(schema_version=3, id=f"incident-{number}", playbook=playbook, outcome=outcome, decision="escalate",
                    opened_at=100.0 + number, closed_at=100.5 + number, snapshot=snapshot, signature=signature_of(snapshot),
                    config_before={"micro_batch_size": 4, "batch_size": 16}, **more).to_json()
    return {**data, "run": run} if run else data


CUSTOM = ["Traceback (most recent call last):", '  File "w.py", line 3, in <module>',
          "pkg.ShardHeaderCorrupted: shard 0x7f3a index 17 in /d/t-1.bin has a bad header after step 12"]


def test_the_pattern_matches_the_same_failure_with_other_values_only():
    sig = signature_of({"trainer": {"alive": False, "exit_code": 1}, "metrics": {"step": 1}, "tail": CUSTOM})
    regex = compile_pattern(pattern_for(sig), False)
    assert regex.search(CUSTOM[-1])
    assert regex.search("pkg.ShardHeaderCorrupted: shard 0xdeadbeef index 9 in /other/x.bin has a bad header after step 31")
    assert not regex.search("pkg.ShardHeaderCorrupted: shard 0x1 index 9 in /x has no header after step 31")
    assert not regex.search("ValueError: shard 0x1 index 9 in /x has a bad header after step 31")


def test_an_unknown_failure_gets_the_safe_default_and_tests_from_every_record():
    target = record(2, CUSTOM)
    preempted = record(1, ["Epoch 1 | iter 4 step 1"], outcome="recovered", playbook="preemption", code=-15)
    repeat = record(3, [line.replace("0x7f3a", "0x11").replace("17", "4") for line in CUSTOM])
    elsewhere = record(2, ["OSError: [Errno 28] No space left on device"], run="/team/bob/runs/pretrain")
    drafted = draft_playbook(target, [preempted, target, repeat, elsewhere], SHIPPED)
    tree = drafted.tree
    assert drafted.name == "shard-header-corrupted" and tree["inhibits"] == ["unknown-crash"]
    assert [list(a)[0] for a in tree["actions"]] == ["verify_checkpoints", "resume", "record"]
    assert tree["limits"] == {"max_attempts": 1, "window": "24h"}
    assert drafted.choice.startswith("the safe default") and "closest:" in drafted.choice
    names = [t["name"] for t in tree["tests"]]
    assert names[0].startswith("fires on incident-2") and names[1].startswith("does not fire on incident-1 (preemption")
    assert names[2].startswith("fires on incident-3 too: the same failure")
    assert names[3].startswith("does not fire on /team/bob/runs/pretrain:incident-2")
    playbook, results = with_pinned_actions(tree, SHIPPED)
    assert all(r.passed for r in results), [(r.test, r.problems) for r in results]
    assert tree["tests"][0]["expect_actions"] == ["verify_checkpoints", "resume", "record"]
    assert "expect_fires_at: null" in as_yaml(tree)
    changes, problems = changed_decisions([preempted, target, repeat], SHIPPED, playbook, RunConfig(), target)
    assert problems == [] and [(c.incident_id, c.expected) for c in changes] == [("incident-2", True), ("incident-3", True)]


def test_a_failure_like_a_known_class_takes_its_actions_with_the_reason():
    oom = ["Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB"]
    target = record(4, oom, escalation_reason="oom limits ran out")
    drafted = draft_playbook(target, [], SHIPPED)
    assert "closest known class 'oom'" in drafted.choice and "same exception type (torch.OutOfMemoryError)" in drafted.choice
    assert [list(a)[0] for a in drafted.tree["actions"]] == ["escalate", "stop", "set_hyperparameters", "prune_checkpoints",
                                                             "verify_checkpoints", "resume"]


def test_incidents_that_need_no_playbook_are_refused_in_one_sentence():
    recovered = record(1, CUSTOM, outcome="recovered", playbook="preemption")
    assert why_not_draftable(recovered) == ("incident-1 was recovered by 'preemption': a playbook already handles "
                                            "this failure, so there is nothing to draft")
    assert "still open" in why_not_draftable(record(2, CUSTOM, outcome="open"))
    hang = record(3, [], playbook="hang")
    hang["snapshot"]["trainer"] = {"alive": True, "stopped": True}
    assert "while the trainer was alive" in why_not_draftable(hang) and "'hang'" in why_not_draftable(hang)
    with pytest.raises(NotDraftable):
        draft_playbook(recovered, [], SHIPPED)


def test_the_slack_notice_names_the_signature_and_the_earlier_incident():
    first = Incident.model_validate(record(1, CUSTOM))
    again = Incident.model_validate({**record(5, CUSTOM), "same_as": "incident-1"})
    assert signature_fields(first)["signature"].startswith(f"{first.signature.id}: exit 1, pkg.ShardHeaderCorrupted")
    assert "seen before" not in signature_fields(first)
    assert signature_fields(again)["seen before"] == "the same unknown failure as incident-1"
