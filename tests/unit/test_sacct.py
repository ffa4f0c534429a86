"""How each allocation ended, from real sacct output of the two-host cluster (tests/data/sacct/)."""

from __future__ import annotations

from pathlib import Path

from engine.cluster.sacct import by_allocation, describe, parse_allocation_ends

REAL = (Path(__file__).resolve().parents[1] / "data" / "sacct" / "two_hosts.txt").read_text()


def test_every_end_state_of_the_real_output_is_named():
    rows = parse_allocation_ends(REAL)
    assert [(r.job_id, r.state, r.ending) for r in rows] == [
        ("1", "CANCELLED", "cancellation"), ("2", "PREEMPTED", "preemption"), ("3", "REQUEUED", "requeued"),
        ("3", "CANCELLED", "cancellation"), ("4", "CANCELLED", "cancellation"), ("2", "CANCELLED", "cancellation"),
        ("5", "COMPLETED", "completed"), ("6", "PREEMPTED", "preemption"), ("6", "NODE_FAIL", "node failure"),
        ("7", "COMPLETED", "completed"), ("8", "FAILED", "failed"), ("9", "TIMEOUT", "time limit"),
        ("10", "COMPLETED", "completed"), ("6", "RUNNING", "running")]
    assert rows[0].by == "0" and rows[1].by is None and rows[10].exit_code == "3:0"


def test_a_requeued_jobs_rows_are_its_allocations_in_order():
    ends = by_allocation(parse_allocation_ends(REAL))
    assert [ends[("6", r)].state for r in range(3)] == ["PREEMPTED", "NODE_FAIL", "RUNNING"]
    assert [ends[("2", r)].state for r in range(2)] == ["PREEMPTED", "CANCELLED"]
    assert ("6", 3) not in ends and ends[("9", 0)].ending == "time limit"
    assert describe(ends[("6", 1)]) == "sacct: NODE_FAIL (node failure) on h[1-2]"
    assert describe(ends[("1", 0)]) == "sacct: CANCELLED (cancellation by uid 0) on h1"
    assert describe(ends[("8", 0)]) == "sacct: FAILED (failed) on h1, exit 3:0"


def test_steps_headers_and_garbage_are_passed_over():
    text = ("JobID|State|Start|End|NodeList|ExitCode\n6.batch|CANCELLED|x|y|h1|0:15\n6.0|FAILED|x|y|h[1-2]|1:0\n"
            "garbage\n||||||\n12|OUT_OF_MEMORY|2026-12-01T10:00:00|2026-12-01T10:01:00|h2|0:125\n")
    assert [(r.job_id, r.ending) for r in parse_allocation_ends(text)] == [("12", "out of memory")]
    assert parse_allocation_ends("") == []
