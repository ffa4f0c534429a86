"""Decide by what a failure is, not by its wording (issue 35): each rule through the real watcher path.

A run folder is written for each ending and judged by `runbook watch --dry-run CONFIG --json` in-process
(tests/field/harness.py judge_ended: the engine's own Observer, exit normalisation, decide and plan), so
what is asserted is what the watcher would do. The logs are shaped like the field's (see tests/field/corpus).

- the same crash signal on every rank at once, or a SIGBUS, is the environment's: escalated, never restarted;
- a SIGHUP/SIGINT reaching the launcher is a stop: resumed unchanged;
- InfiniBand/RoCE completion errors and store-based barrier timeouts are lost collectives;
- srun's `*** STEP ... CANCELLED AT ... ***` without `DUE TO` is no preemption;
- a bare `Killed` at exit 137 is a kill, not an OOM.
"""

from __future__ import annotations

import pytest

from engine.core.config import RunConfig
from engine.core.rank_signals import reports_from_log, same_signal_everywhere
from engine.language.matcher import AttemptHistory, MatchMemory, decide
from engine.language.playbook_set import load_set
from engine.language.playbook_testing import build_snapshots
from tests.field.harness import RECOVERY_VERBS, Case, judge_ended, make_field_project


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return make_field_project(tmp_path_factory.mktemp("kind-rules"))


def judge(config, log: str, exit_: dict, launcher: str = "torchrun"):
    return judge_ended(config, Case("probe", "probe", "?", exit_, launcher, False, log))


def torchrun_failures(signal_number: int, name: str, pids: list[int]) -> str:
    lines = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "Failures:"]
    for i, pid in enumerate(pids[1:], start=1):
        lines += [f"[{i}]:", f"  rank      : {i} (local_rank: {i})", f"  exitcode  : -{signal_number} (pid: {pid})",
                  f"  traceback : Signal {signal_number} ({name}) received by PID {pid}"]
    lines += ["Root Cause (first observed failure):", "[0]:", "  rank      : 0 (local_rank: 0)",
              f"  exitcode  : -{signal_number} (pid: {pids[0]})", f"  traceback : Signal {signal_number} ({name}) received by PID {pids[0]}"]
    return "\n".join(lines)


# --- the environment's: escalated, nothing restarted ------------------------------------------------
def test_sigbus_on_every_rank_at_once_is_escalated_and_never_restarted(config):
    verdict = judge(config, torchrun_failures(7, "SIGBUS", [16609, 16610, 16611, 16612]), {"code": 1})
    assert verdict.playbook == "environment-fault", verdict
    assert verdict.escalated and not RECOVERY_VERBS & set(verdict.actions), verdict.actions


def test_the_same_segfault_on_every_rank_is_escalated_but_one_ranks_segfault_is_restarted_once(config):
    everywhere = judge(config, torchrun_failures(11, "SIGSEGV", [21, 22, 23]), {"code": 1})
    assert everywhere.playbook == "environment-fault" and everywhere.escalated, everywhere
    one = judge(config, "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 0 "
                        "(pid: 1299143) of binary: /usr/bin/python", {"code": 1})
    assert one.playbook == "rank-exited" and "resume" in one.actions, one


def test_a_bus_error_caught_in_one_process_inside_a_container_is_escalated(config):
    log = "[8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)\n" \
          "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
    verdict = judge(config, log, {"code": 1})
    assert verdict.playbook == "environment-fault" and verdict.escalated, verdict


def test_every_rank_dead_of_sigbus_in_their_own_exit_records_is_escalated():
    """The live watcher's evidence (state.trainer.ranks, from rank-N.exit.json), not the log's."""
    ranks = {"world_size": 4, "ranks": [{"rank": r, "exit_code": -7, "signal": "SIGBUS"} for r in range(4)],
             "exited": [0, 1, 2, 3], "failed": [0, 1, 2, 3], "first_failed": 2, "first_failed_signal": "SIGBUS"}
    [snapshot] = build_snapshots([{"trainer": {"alive": False, "exit_code": 1, "ranks": ranks}}], RunConfig())
    outcome = decide(snapshot, RunConfig(), load_set([], True)[0], MatchMemory(), AttemptHistory())
    assert outcome.decision is not None and outcome.decision.playbook.name == "environment-fault", outcome
    assert "rank-died" in outcome.decision.inhibited   # rank-died (priority 89) would have restarted it


# --- a stop, not a crash -----------------------------------------------------------------------------
@pytest.mark.parametrize("log", [
    "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers\n"
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 2920926 closing signal SIGHUP\n"
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 2920830 got signal: 1",
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 53738 closing signal SIGHUP\n"
    "Traceback (most recent call last):\n  File \"/usr/bin/torchrun\", line 8, in <module>\n    sys.exit(main())",
])
def test_sighup_reaching_torchrun_is_resumed_with_nothing_changed(config, log):
    verdict = judge(config, log, {"code": 1})
    assert verdict.playbook == "launcher-stopped" and verdict.decision == "recover", verdict
    assert "resume" in verdict.actions and not {"set_hyperparameters", "set_env", "rollback"} & set(verdict.actions)


# --- the fabric's -------------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> "
    "with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00:1148:9000:5000:4:200:3:ff22",
    "RuntimeError: Timed out initializing process group in store based barrier on rank: 7, for key: "
    "store_based_barrier_key:32 (world_size=8, worker_count=4, timeout=0:00:30)",
])
def test_transport_errors_and_store_barrier_timeouts_are_lost_collectives(config, line):
    verdict = judge(config, line, {"code": 1})
    assert verdict.playbook == "collective-timeout", verdict


def test_nccl_finding_no_socket_interface_is_the_configs_and_never_relaunched(config):
    log = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2251, internal error\n" \
          "ncclInternalError: Internal check failed.\nLast error:\nBootstrap : no socket interface found"
    verdict = judge(config, log, {"code": 1})
    assert verdict.escalated and not RECOVERY_VERBS & set(verdict.actions), verdict


# --- srun's teardown is no preemption ---------------------------------------------------------------
def test_a_step_cancelled_without_due_to_is_a_failed_rank_not_a_preemption(config):
    log = "slurmstepd: error: *** STEP 6053.0 ON node-7 CANCELLED AT 2024-04-23T12:18:08 ***\n" \
          "srun: error: node-7: task 0: Terminated"
    verdict = judge(config, log, {"code": 143}, launcher="srun")
    assert verdict.playbook == "rank-exited", verdict
    preempted = judge(config, "slurmstepd: error: *** JOB 32391783 ON cn119 CANCELLED AT 2021-06-18T13:05:36 DUE TO "
                              "PREEMPTION ***", {"code": 143}, launcher="srun")
    assert preempted.playbook == "preemption", preempted


# --- a kill is a kill ---------------------------------------------------------------------------------
def test_a_bare_killed_at_137_without_memory_evidence_is_killed_not_oom(config):
    verdict = judge(config, "./train.sh: line 1:  7364 Killed                  python3 train.py --name=D0",
                    {"code": 137}, launcher="none")
    assert verdict.playbook == "killed", verdict
    with_evidence = judge(config, "./train.sh: line 1:  7364 Killed   python3 train.py\nslurmstepd: error: Detected 1 "
                                  "oom-kill event(s) in StepId=191.batch cgroup.", {"code": 137}, launcher="none")
    assert with_evidence.playbook == "oom", with_evidence


# --- the reports themselves (pure) ---------------------------------------------------------------------
def test_a_pid_named_twice_is_one_report_and_an_srun_range_counts_each_task():
    reports = reports_from_log(torchrun_failures(7, "SIGBUS", [5, 6]).splitlines())
    assert [r.signal for r in reports] == ["SIGBUS", "SIGBUS"]
    srun = reports_from_log(["srun: error: n1: tasks 0-2,5: Bus error"])
    assert len(srun) == 4 and {r.signal for r in srun} == {"SIGBUS"}


def test_spawn_and_open_mpi_reports_are_read_too():
    spawn = reports_from_log(["torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGBUS"])
    mpi = reports_from_log(["[node1:05283] *** Process received signal ***", "[node1:05283] Signal: Bus error (7)",
                            "[node1:05284] Signal: Bus error (7)"])
    assert [r.signal for r in spawn] == ["SIGBUS"] and [r.signal for r in mpi] == ["SIGBUS", "SIGBUS"]


def test_unanimity_needs_two_reports_of_one_crash_signal():
    assert same_signal_everywhere(["SIGBUS", "SIGBUS"]) == "SIGBUS"
    assert same_signal_everywhere(["SIGBUS"]) is None                  # one process is no "every rank"
    assert same_signal_everywhere(["SIGSEGV", None]) is None           # another ended by its own exit code
    assert same_signal_everywhere(["SIGTERM", "SIGTERM"]) is None      # a stop request, not a crash


def test_a_hostile_line_is_read_within_bounds():
    reports = reports_from_log(["exitcode  : -7 (pid: 1) " + "x" * 10_000_000, "srun: error: n: tasks " + "1-" * 10_000 + ": Bus error"])
    assert len(reports) <= 4096


# --- a real watched run ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_real_worker_dead_of_sigbus_behind_its_launcher_is_escalated_and_never_relaunched(tmp_path):
    """`runbook watch` of a real trainer process whose worker a real SIGBUS kills (tests/unit/sigbus_launcher.py):
    one launch, one incident, escalated; before environment-fault, rank-exited relaunched it."""
    import json

    from runbook.exit_codes import ExitCode
    from tests.conftest import REPO, stop_process
    from tests.runs.test_toy_trainer import make_toy_project

    project = make_toy_project(tmp_path / "project")
    project.set(trainer={"kind": "python:tests.unit.sigbus_launcher:SigbusLauncherToyAdapter"})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        assert watcher.wait(timeout=90) == ExitCode.ESCALATED, project.watch_output()
    finally:
        stop_process(watcher)
    [incident] = project.incidents(include_slow=True)
    assert incident["playbook"] == "environment-fault" and incident["outcome"] == "escalated", json.dumps(incident)[:2000]
    verbs = {a.get("verb") for a in incident.get("actions", [])}
    assert not verbs & {"resume", "set_hyperparameters", "set_env", "rollback"}, verbs
    assert len(list((project.run_dir / "logs").glob("trainer-*.log"))) == 1   # launched once, never again
