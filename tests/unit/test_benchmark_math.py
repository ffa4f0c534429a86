"""The arithmetic the overhead benchmark's verdict rests on (benchmarks/alternating_blocks.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.alternating_blocks import Block, PairedResult, merge, paired_rates, steps_at


def synthetic_run(cost: float, drift_per_s: float, block_s: float = 1.5, blocks: int = 21):
    """Step lines every 10 ms of a trainer whose speed drifts linearly, slowed by `cost` while the
    watcher runs; the blocks alternate paused / running from t = 1 s."""
    edges = [1.0 + i * block_s for i in range(blocks + 1)]
    plan = [Block("paused" if i % 2 == 0 else "running", edges[i], edges[i + 1]) for i in range(blocks)]
    stamps, step, t = [(0, 0.0)], 0.0, 0.0
    while t < edges[-1] + 1.0:
        running = any(b.state == "running" and b.start <= t < b.end for b in plan)
        rate = (20.0 + drift_per_s * t) * ((1 - cost) if running else 1.0)
        t += 0.01
        step += rate * 0.01
        stamps.append((step, t))
    return stamps, plan


def test_steps_between_step_lines_are_interpolated():
    stamps = [(10, 1.0), (20, 2.0)]
    assert steps_at(stamps, 1.5) == 15 and steps_at(stamps, 0.0) == 10 and steps_at(stamps, 9.0) == 20


@pytest.mark.parametrize("cost", [0.0, 0.01, 0.10])
def test_the_a_b_a_ratio_recovers_the_cost_under_a_linear_drift(cost):
    stamps, plan = synthetic_run(cost, drift_per_s=0.5)   # the trainer speeds up 2.5% a second
    result = paired_rates(stamps, plan)
    assert len(result.ratios) == 10
    assert result.mean_ratio == pytest.approx(1 - cost, abs=0.002)
    low, high = result.ci95
    assert low == pytest.approx(1 - cost, abs=0.003) and high == pytest.approx(1 - cost, abs=0.003)
    assert 0 < high - low < 0.002   # the same cost in every block: a narrow interval, not a point


def test_the_95_percent_interval_is_mean_plus_minus_1_96_standard_errors():
    # (low <= mean <= high holds for any symmetric interval, a wrong one too: check the numbers.)
    result = PairedResult([0.9, 1.0, 1.1], 10.0, 10.0)
    low, high = result.ci95
    half = 1.96 * 0.1 / 3 ** 0.5
    assert (low, high) == pytest.approx((1.0 - half, 1.0 + half), abs=1e-12)
    assert PairedResult([0.97], 10.0, 9.7).ci95 == (float("-inf"), float("inf"))   # one block bounds nothing


def test_blocks_outside_the_training_window_and_non_adjacent_ones_are_left_out():
    stamps, plan = synthetic_run(0.05, drift_per_s=0.0)
    late = Block("running", plan[-1].end + 5.0, plan[-1].end + 6.5)   # after the last step line
    gap = [plan[0], plan[1], Block("paused", plan[1].end + 2.0, plan[1].end + 3.5)]
    assert len(paired_rates(stamps, plan + [late]).ratios) == 10
    assert paired_rates(stamps, gap).ratios == []
    both = merge([paired_rates(stamps, plan), paired_rates(stamps, plan)])
    assert len(both.ratios) == 20 and both.mean_ratio == pytest.approx(0.95, abs=0.002)


def test_the_chaos_goals_are_checked_on_the_figures():
    from benchmarks.chaos_report import Outcome, goals

    reference = Outcome("ref", completed=True, steps=12, tokens=196_608, val_loss=5.58)
    detail = {"id": "incident-4", "allowed": 4, "steps_lost": 4}
    good = Outcome("rb", completed=True, steps=12, tokens=196_608, val_loss=5.43, details=[detail])
    assert "**missed**" not in goals(good, reference)
    worse = Outcome("rb", completed=True, steps=12, tokens=196_608, val_loss=7.17, details=[{**detail, "steps_lost": 5}])
    text = goals(worse, reference)
    assert "final val loss within 5% of the reference (28.49%): **missed**" in text
    assert "(exceeded by incident-4): **missed**" in text
    assert "no human action: met" in text


def test_chaos_accounting_lines_sum_to_runbooks_extra_wall_time():
    from benchmarks.chaos_report import Outcome, accounting_lines

    reference = Outcome("(a)", completed=True, wall_s=36.0,
                        timeline={"started": 0.0, "first_progress": 5.0, "iter_s": 20.0})
    incidents = [{"playbook": "oom", "detected_at": 14.0, "runbook_s": 0.2, "restart_s": 6.0, "steps_lost": 0},
                 {"playbook": "preemption", "detected_at": 40.0, "runbook_s": 0.1, "restart_s": 1.0, "steps_lost": 0},
                 {"playbook": "hang", "detected_at": 70.0, "runbook_s": 0.3, "restart_s": 1.2, "steps_lost": 2}]
    runbook = Outcome("(b)", completed=True, wall_s=100.0,
                      timeline={"started": 0.0, "launches": [1.5, 14.3, 40.2, 70.4], "iter_s": 26.0,
                                "incidents": incidents, "injected": [39.5, 48.0]})
    lines = dict(accounting_lines(runbook, reference))
    assert sum(lines.values()) == pytest.approx(64.0)
    assert lines["watcher start-up before the first launch (config, data hash, preflight)"] == pytest.approx(1.5)
    assert next(v for k, v in lines.items() if k.startswith("detection")) == pytest.approx(0.5 + 22.0)
    assert next(v for k, v in lines.items() if k.startswith("training iterations")) == pytest.approx(6.0)
    assert accounting_lines(Outcome("x", timeline={}), reference) == []


WATCH = SimpleNamespace(hang_timeout_s=120.0, hang_floor_s=5.0, hang_safety_factor=5.0)


def test_the_chaos_floor_counts_only_what_no_supervisor_avoids_and_says_what_2x_needs():
    from benchmarks.chaos_report import Outcome, floor_lines, floor_text

    reference = Outcome("(a)", completed=True, wall_s=8.0, steps=12,
                        timeline={"started": 0.0, "first_progress": 3.0, "iter_s": 1.2, "longest_gap_s": 1.4})
    incidents = [{"playbook": "oom", "detected_at": 5.5, "runbook_s": 0.1, "restart_s": 3.0, "steps_lost": 0},
                 {"playbook": "preemption", "detected_at": 9.0, "runbook_s": 0.1, "restart_s": 1.0, "steps_lost": 0},
                 {"playbook": "hang", "detected_at": 16.0, "runbook_s": 0.1, "restart_s": 1.0, "steps_lost": 0,
                  "hang_timeout_s": 7.2},
                 {"playbook": "corrupt-checkpoint", "detected_at": 20.0, "runbook_s": 0.1, "restart_s": 1.0, "steps_lost": 4}]
    details = [{"playbook": i["playbook"], "steps_lost": i["steps_lost"], "after_injection_s": a}
               for i, a in zip(incidents, [None, 0.4, 5.0, 0.1])]
    runbook = Outcome("(b')", completed=True, wall_s=30.0, details=details,
                      timeline={"started": 0.0, "launches": [2.0, 5.6, 9.1, 16.1, 20.1], "incidents": incidents})
    lines = floor_lines(runbook, reference, WATCH)
    # OOM launch, the hang timeout derived as the watcher does (5 x the reference's 1.4 s gap), notice save, 4 x 0.1 s
    assert [round(s, 2) for _what, s, _source in lines] == [3.5, 7.0, 0.4, 0.4]
    sources = [source for _what, _s, source in lines]
    assert all(s.startswith(("measured", "derived", "setting")) for s in sources), sources
    assert "measured in the reference run, 1.40 s" in sources[1] and "the measured gap binds" in sources[1]
    assert "the watcher's own value in the run: 7.2 s" in sources[1]
    # the contender's own gaps before the SIGSTOP come first: the run's own derived hang timeout
    runbook.timeline["longest_gap_s"] = 1.44
    what, seconds, source = floor_lines(runbook, reference, WATCH)[1]
    assert seconds == pytest.approx(7.2) and "measured in (b')'s run before the SIGSTOP, 1.44 s" in source
    assert "from the reference's longest gap (1.40 s) it would be 7.0 s" in source
    del runbook.timeline["longest_gap_s"]
    text = floor_text(runbook, reference, WATCH)
    # (8 + 11.3) / 8 with the hang line, (8 + 4.3) / 8 without it
    assert "**2.41x**" in text and "without the hang line 1.54x" in text
    assert "3 relaunches" in text and "at least 11.3 s (14.3 s with these relaunches)" in text
    assert floor_lines(Outcome("x", completed=False), reference, WATCH) == []


def test_the_floors_hang_line_falls_back_to_the_floor_setting_when_no_gap_was_measured():
    from benchmarks.chaos_report import Outcome, floor_lines

    reference = Outcome("(a)", completed=True, wall_s=8.0, steps=12, timeline={"iter_s": 1.2})
    runbook = Outcome("(b)", completed=True, wall_s=30.0, timeline={
        "launches": [0.0], "incidents": [{"playbook": "hang", "detected_at": 9.0, "steps_lost": 0, "restart_s": 1.0}]})
    what, seconds, source = floor_lines(runbook, reference, WATCH)[0]
    assert seconds == 5.0 and source == "setting: hang_floor_s = 5 s (no progress gap measured)"


def test_the_derived_hang_timeout_is_the_watchers_own_function():
    from benchmarks.bench_math import derived_hang_timeout, longest_gap

    assert derived_hang_timeout(0.3, WATCH) == 5.0      # 1.5 s, below the floor
    assert derived_hang_timeout(2.0, WATCH) == 10.0     # 5 x the gap
    assert derived_hang_timeout(60.0, WATCH) == 120.0   # the ceiling
    assert derived_hang_timeout(None, WATCH) == 120.0   # no progress yet: the ceiling, as the watcher does
    assert longest_gap([3.0, 1.0, 1.5, 4.2]) == pytest.approx(1.5) and longest_gap([1.0]) is None


def test_floor_ratios_with_and_without_the_hang_line():
    from benchmarks.bench_math import floor_ratios

    lines = [("the OOM launch", 2.0, "measured"), ("the hang timeout (5.0 s), 1 hang(s)", 5.0, "setting"),
             ("4 steps", 1.0, "measured")]
    r = floor_ratios(10.0, lines)
    assert (r["floor_s"], r["floor_without_hang_s"]) == (8.0, 3.0)
    assert r["ratio"] == pytest.approx(1.8) and r["ratio_without_hang"] == pytest.approx(1.3)
    assert floor_ratios(0.0, lines)["ratio"] is None


def test_median_and_worst_of_repeated_samples():
    from benchmarks.bench_math import summarize

    s = summarize([3.0, 1.0, None, 2.0, 10.0])
    assert (s.n, s.of, s.median, s.worst) == (4, 5, 2.5, 10.0)
    assert s.text() == "2.50 / 10.00 (4 of 5)"
    assert summarize([1.0, 2.0, 3.0]).text(".1f") == "2.0 / 3.0 (3)"
    assert summarize([None, None]).text() == "- (0 of 2)" and summarize([]).median is None


def test_where_a_chaos_contender_stopped():
    from benchmarks.bench_math import stop_point

    schedule = ["SIGTERM", "SIGSTOP hang", "corrupt"]
    assert stop_point(True, schedule, schedule, "completed", "applied") == (
        "OOM at start, SIGTERM, SIGSTOP hang, corrupt", "- (completed)", "met every fault of the schedule it was given")
    met, where, why = stop_point(False, schedule, ["SIGTERM", "SIGSTOP hang"], "hung: no progress", "does not apply")
    assert (met, where, why) == ("SIGTERM, SIGSTOP hang", "SIGSTOP hang", "hung: no progress")
    assert stop_point(False, schedule, [], "gave up", "applied")[1] == "OOM at start"
    assert stop_point(False, schedule, [], "exit 2", "does not apply")[1] == "before the first fault (SIGTERM)"
    assert stop_point(False, schedule, schedule, "gave up", None, last_failure="disk full")[1].startswith("the disk fault")


def test_spurious_incidents_of_an_undisturbed_run():
    from benchmarks.bench_math import spurious

    slow = {"playbook": "slow-training", "diagnosis": {"cause": "contention"},
            "actions": [{"verb": "diagnose_slowness"}, {"verb": "notify"}, {"verb": "wait_for"}]}
    assert spurious(slow) == (False, "slow-training, diagnosis names an outside cause (contention), no relaunch")
    assert spurious({**slow, "diagnosis": {"cause": "compute"}})[0] is True
    assert spurious({**slow, "diagnosis": None})[0] is True
    assert spurious({**slow, "actions": slow["actions"] + [{"verb": "resume"}]})[0] is True
    assert spurious({**slow, "actions": slow["actions"] + [{"verb": "stop", "skipped": True}]})[0] is False
    assert spurious({**slow, "resumed_step": 10})[0] is True
    assert spurious({"playbook": "hang", "actions": []}) == (True, "hang in an undisturbed run")


def test_repeated_chaos_runs_agree_only_on_the_same_incidents_and_end():
    from benchmarks.bench_chaos_repeat import agreement, report

    def outcome(name, incidents, completed=True, note="completed"):
        return {"name": name, "incidents": incidents, "completed": completed, "note": note, "wall_s": 1.0}

    runbook = ["oom (recovered)", "preemption (recovered)", "hang (recovered)"]
    naive = ["restart after: killed by a signal (no message)", "hang (never detected)"]
    first = [outcome("(a) reference", []), outcome("(b) runbook watch", runbook),
             outcome("(c) naive loop, cap 3, micro-batch 128", naive, False, "hung: no progress for 10 s")]
    same = [dict(o, wall_s=9.0) for o in first]          # other timings, same incidents: agreed
    spurious = [first[0], outcome("(b) runbook watch", ["oom (recovered)", "hang (recovered)", *runbook[1:]]), first[2]]
    rows = agreement([first, same])
    assert [r["agreed"] for r in rows] == [True, True, True]
    assert [r["contender"] for r in rows] == ["(a) reference", "(b) runbook watch", "(c) naive loop, cap 3, micro-batch 128"]
    rows = agreement([first, same, spurious])
    assert [r["agreed"] for r in rows] == [True, False, True]
    assert "agreed in all 3 run(s): 2 of 3 contender(s)" in report(rows, 3) and "**no**" in report(rows, 3)
    # a contender that ended elsewhere, or is missing from a run, does not agree
    stopped = [first[0], first[1], outcome(first[2]["name"], naive, False, "gave up: restart cap 3 reached")]
    assert [r["agreed"] for r in agreement([first, stopped])] == [True, True, False]
    rows = agreement([first, first[:2]])
    assert rows[2]["agreed"] is False and rows[2]["signatures"][1] is None and "(missing)" in report(rows, 2)


def test_the_latency_report_says_other_work_shared_the_cores_only_when_the_load_shows_it(monkeypatch):
    import os

    from benchmarks.bench_latency import contention_sentence

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    quiet = contention_sentence([{"load": "1.21, 1.0, 1.0"}, {"load": "1.63, 1.5, 1.4"}, {"load": "1.37, 1, 1"}])
    busy = contention_sentence([{"load": "1.21, 1.0, 1.0"}, {"load": "6.10, 5, 4"}])
    assert quiet.startswith("The 1-minute load average after each sample: median 1.37, highest 1.63, on 2 cores")
    assert "other jobs" not in quiet and "no other work" in quiet
    assert "other jobs shared the cores" in busy and "highest 6.10" in busy
    assert contention_sentence([{"class": "sigkill"}]) == ""


def test_the_own_share_goal_names_the_classes_that_miss_it():
    from benchmarks.bench_latency import own_share_goal

    sample = lambda cls, runbook, verify=0.02, outcome="recovered": {  # noqa: E731
        "class": cls, "runbook_s": runbook, "verify_s": verify, "outcome": outcome}
    met = own_share_goal([sample("sigkill", 0.25), sample("hang", 0.52), sample("oom", 9.0, outcome="escalated")])
    assert met.endswith("worst 0.500 s, met")
    missed = own_share_goal([sample("sigkill", 0.25), sample("preemption-warm", 3.1), sample("preemption-warm", 4.6)])
    assert "**missed** by preemption-warm (worst 4.580 s: its `resume` waited for the warm spare's imports" in missed
    assert missed.endswith("met by the other 1 class(es) (worst 0.230 s)")
    assert own_share_goal([sample("oom", 1.0, outcome="escalated")]) == "no recovered sample"
