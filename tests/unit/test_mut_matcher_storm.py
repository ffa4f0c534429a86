"""The restart-storm guard, pure (issue 48 item 5): the chain and the verdict (engine/language/restart_storm.py),
through the real matcher and the journal's rebuild; the real run is tests/runs/test_restart_storm.py."""

from __future__ import annotations

from engine.core.config import RunConfig
from engine.language.matcher import MatchMemory, decide
from engine.language.playbook_set import load_set
from engine.language.playbook_testing import build_snapshots
from engine.language.restart_storm import chain_since_progress, restart_storm
from engine.records.journal import rebuild

SHIPPED = load_set([], True)[0]


def test_the_chain_is_every_recovery_since_the_earliest_step_the_run_has_not_got_past():
    steps = [("oom", 1.0, 10), ("hang", 2.0, 12), ("oom", 3.0, 12), ("killed", 4.0, 20)]
    assert chain_since_progress(tuple(steps), 20) == tuple(steps[3:])      # past 10 and 12 since: only the last
    rollback = [("nan", 1.0, 30), ("hang", 2.0, 12), ("oom", 3.0, 12), ("killed", 4.0, 20)]
    assert chain_since_progress(tuple(rollback), 20) == tuple(rollback)    # never past 30 (rolled back below it)
    assert chain_since_progress(tuple(rollback), 31) == ()                 # past every one of them
    assert chain_since_progress((("oom", 1.0, None), ("hang", 2.0, None)), None) == (("oom", 1.0, None), ("hang", 2.0, None))
    assert chain_since_progress((("oom", 1.0, None),), 0) == ()            # a first step is progress past none


def test_a_storm_needs_the_limit_and_two_kinds():
    four_kinds = (("oom", 1.0, 7), ("hang", 2.0, 7), ("collective-timeout", 3.0, 6), ("oom", 4.0, 7))
    storm = restart_storm(four_kinds, "hang", 7, 5)
    assert storm is not None and len(storm.chain) == 4
    reason = storm.reason(64.0)
    assert reason.startswith("restart storm: 5 incidents of 3 kinds in 1.1 min and the run never got past step 7:"), reason
    assert "collective-timeout at step 6" in reason and "and now hang at step 7" in reason, reason
    assert restart_storm(four_kinds, "hang", 7, 6) is None                 # one short of the limit
    assert restart_storm(four_kinds, "hang", 8, 5) is None                 # the run got past step 7
    one_kind = tuple(("oom", float(i), None) for i in range(5))
    assert restart_storm(one_kind, "oom", None, 5) is None                 # the OOM ladder: oom's own limit judges
    assert restart_storm(four_kinds, "hang", 7, 5, not_counted=frozenset({"oom"})) is None   # pruning-like ones


def test_the_matcher_escalates_the_fifth_incident_of_a_storm_and_the_journal_keeps_the_steps():
    entries = [{"kind": "incident_opened", "incident": f"incident-{i}", "playbook": name, "decision": "recover",
                "time": 100.0 + i, "snapshot": {"metrics": {"step": 3}}}
               for i, name in enumerate(["killed", "preemption", "killed", "preemption"], start=1)]
    history = rebuild(entries).history
    assert [(name, step) for name, _, step in history.recoveries] == [("killed", 3), ("preemption", 3)] * 2
    config = RunConfig()
    [snapshot] = build_snapshots([{"trainer": {"alive": False, "exit_code": -9}, "metrics": {"step": 3}}], config)
    decision = decide(snapshot, config, SHIPPED, MatchMemory(), history).decision
    assert decision is not None and decision.playbook.name == "killed" and decision.kind == "escalate", decision
    assert decision.reason.startswith("restart storm: 5 incidents of 2 kinds"), decision.reason
    fewer = rebuild(entries[:3]).history
    assert decide(snapshot, config, SHIPPED, MatchMemory(), fewer).decision.kind == "recover"


def test_a_playbook_past_its_own_limit_says_so_rather_than_storm():
    entries = [{"kind": "incident_opened", "incident": f"incident-{i}", "playbook": name, "decision": "recover",
                "time": 100.0 + i, "snapshot": {"metrics": {"step": 3}}}
               for i, name in enumerate(["killed", "preemption", "killed", "killed"], start=1)]
    config = RunConfig()
    [snapshot] = build_snapshots([{"trainer": {"alive": False, "exit_code": -9}, "metrics": {"step": 3}}], config)
    snapshot = snapshot.model_copy(update={"time": 200.0})
    decision = decide(snapshot, config, SHIPPED, MatchMemory(), rebuild(entries).history).decision
    assert decision.kind == "escalate" and "already fired 3 time(s)" in decision.reason, decision.reason


def test_a_divergence_ladder_rolling_back_below_its_failures_is_no_storm():
    entries = [{"kind": "incident_opened", "incident": f"incident-{i}", "playbook": name, "decision": "recover",
                "time": 100.0 + i, "snapshot": {"metrics": {"step": step}}}
               for i, (name, step) in enumerate([("nan", 22), ("nan", 10), ("loss-spike", 12), ("loss-spike", 6)], start=1)]
    config = RunConfig()
    [snapshot] = build_snapshots([{"trainer": {"alive": True}, "metrics": {
        "step": 17, "loss": 40.0, "loss_best_median": 6.0, "loss_history": [40.0, 40.0, 40.0, 40.0]}}], config)
    decision = decide(snapshot, config, SHIPPED, MatchMemory(), rebuild(entries).history).decision
    assert decision.playbook.name == "loss-spike" and decision.kind == "recover", decision
    # a crash of another kind in the same chain counts only the crashes: one kind, no storm either
    [crash] = build_snapshots([{"trainer": {"alive": False, "exit_code": -9}, "metrics": {"step": 5}}], config)
    assert decide(crash, config, SHIPPED, MatchMemory(), rebuild(entries).history).decision.kind == "recover"
