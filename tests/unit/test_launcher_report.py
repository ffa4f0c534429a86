"""The first failed rank decides (engine/observe/launcher_report.py): the launcher's report read from a real
torchrun log, merged with the ranks' own records, and the wait while the launcher lives.

torchrun_sigkill_rank1.log: torch 2.13's torchrun, 2 CPU ranks of examples/ddp_script/train.py, rank 1
SIGKILLed from outside at step ~12 (2026-12-06, this machine; progress lines dropped): rank 0 prints gloo's
"Connection reset by peer", torchrun SIGTERMs it and prints its ChildFailedError block.

torchrun_early_return_abort.log: the same, rank 1 returned at step 9 while rank 0 trained
(tests/cluster/test_launcher_ranks.py's early exit, 2026-12-06, this machine; one run in ~10): rank 1 wrote its
clean exit, then aborted in its teardown (`terminate called without an active exception`), and torchrun named
that SIGABRT the root cause. The run was restarted by rank-exited before rank-error escalated the early return.
"""

from __future__ import annotations

from pathlib import Path

from engine.core.state import RanksStatus, RankStatus
from engine.observe.launcher_report import awaiting_first_failure, first_failure, read_report, with_report

LOG = (Path(__file__).with_name("torchrun_sigkill_rank1.log")).read_text().splitlines()
EARLY_RETURN_ABORT = (Path(__file__).with_name("torchrun_early_return_abort.log")).read_text().splitlines()


def test_torchruns_real_report_names_the_killed_rank_as_the_root_cause():
    report = read_report(LOG)
    assert report.root_cause == 1
    assert report.failures[1].exit_code == -9
    assert report.failures[0].exit_code == -15                 # the survivor, torn down by torchrun
    assert "Connection reset by peer" in report.errors[0]      # [rank0]: RuntimeError: ... its own line


def test_the_killed_rank_is_first_and_the_survivors_lost_peer_is_only_the_echo():
    ranks = RanksStatus(world_size=2, ranks=[RankStatus(rank=0, pid=10, alive=False), RankStatus(rank=1, pid=11)])
    merged = with_report(ranks, read_report(LOG), trainer_pid=9)
    assert merged.first_failed == 1 and merged.first_failed_signal == "SIGKILL"
    assert merged.first_failed_cause == "signal"
    assert merged.under_launcher
    assert next(r for r in merged.ranks if r.rank == 0).peer_loss


def test_a_ranks_own_exception_comes_before_the_lost_peer_it_caused_whatever_the_launcher_saw_first():
    ranks = [RankStatus(rank=0, exit_code=1, ended_at=100.0, error="RuntimeError: the user's own bug", where="train.py:9"),
             RankStatus(rank=1, exit_code=1, ended_at=100.4, error="RuntimeError: Connection closed by peer [127.0.0.1]:1",
                        peer_loss=True)]
    assert first_failure(ranks, root_cause=1).rank == 0
    # ... and when the launcher teared the survivor down with SIGTERM before it recorded anything
    ranks[1] = RankStatus(rank=1, exit_code=-15, signal="SIGTERM")
    assert first_failure(ranks, root_cause=None).rank == 0


def test_a_rank_that_returned_before_its_peers_failed_is_the_first_failure():
    ranks = [RankStatus(rank=0, exit_code=1, ended_at=200.0, error="RuntimeError: Connection closed by peer", peer_loss=True),
             RankStatus(rank=1, exit_code=0, ended_at=150.0)]
    status = with_report(RanksStatus(world_size=2, ranks=ranks), read_report([]))
    assert status.first_failed == 1 and status.first_failed_cause == "early-exit"
    # a rank that ended 0 after the others failed is no cause
    ranks[1] = RankStatus(rank=1, exit_code=0, ended_at=250.0)
    assert first_failure(ranks, None).rank == 0


def test_a_rank_that_returned_and_then_aborted_in_its_teardown_returned_early():
    report = read_report(EARLY_RETURN_ABORT)
    assert report.root_cause == 1 and report.failures[1].exit_code == -6
    own = [RankStatus(rank=0, exit_code=1, ended_at=14.34, error="RuntimeError: [pair.cc:553] Connection closed by peer",
                      peer_loss=True),
           RankStatus(rank=1, exit_code=0, ended_at=14.30)]       # its own record: it returned
    status = with_report(RanksStatus(world_size=2, ranks=own), report)
    assert (status.first_failed, status.first_failed_cause) == (1, "early-exit"), status
    # no record of its own: the launcher's SIGABRT is all there is
    status = with_report(RanksStatus(world_size=2, ranks=[own[0], RankStatus(rank=1, pid=11)]), report)
    assert (status.first_failed, status.first_failed_cause) == (1, "signal"), status
    # a clean record, then killed from outside (SIGKILL): the launcher's word wins, as before
    killed = read_report([line.replace("exitcode  : -6", "exitcode  : -9") for line in EARLY_RETURN_ABORT])
    status = with_report(RanksStatus(world_size=2, ranks=own), killed)
    assert (status.first_failed, status.first_failed_signal) == (1, "SIGKILL"), status


def test_only_lost_peers_is_a_collective_failure():
    ranks = [RankStatus(rank=0, exit_code=1, ended_at=1.0, error="RuntimeError: Connection closed by peer", peer_loss=True),
             RankStatus(rank=1, exit_code=1, ended_at=2.0, error="DistNetworkError: Broken pipe", peer_loss=True)]
    status = with_report(RanksStatus(world_size=2, ranks=ranks), read_report([]))
    assert status.first_failed == 0 and status.first_failed_cause == "peer-loss"


def test_deepspeed_and_srun_reports():
    ds = read_report(["[2024-01-01 10:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', "
                      "'train.py', '--local_rank=3'] exits with return code = -9"])
    assert ds.failures[3].exit_code == -9
    srun = read_report(["srun: error: node12: task 1: Segmentation fault", "srun: error: node12: task 0: Exited with exit code 1"])
    assert srun.failures[1].exit_code == -11 and srun.failures[0].exit_code == 1


def test_the_watch_waits_while_a_rank_is_gone_unexplained_or_only_lost_peers_are_seen():
    gone = RanksStatus(world_size=2, ranks=[RankStatus(rank=0, pid=10, alive=True), RankStatus(rank=1, pid=11, alive=False)])
    assert awaiting_first_failure(gone, [])
    healthy = RanksStatus(world_size=2, ranks=[RankStatus(rank=0, pid=10, alive=True), RankStatus(rank=1, pid=11, alive=True)])
    assert not awaiting_first_failure(healthy, ["runbook: step 3 loss 4.0 took 10 ms"])
    assert awaiting_first_failure(healthy, ["[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:5"])
    own = with_report(RanksStatus(world_size=2, ranks=[
        RankStatus(rank=0, pid=10, alive=True),
        RankStatus(rank=1, pid=11, exit_code=1, ended_at=5.0, error="ValueError: bad", where="train.py:3")]), read_report([]))
    assert not awaiting_first_failure(own, ["[rank0]: RuntimeError: Connection closed by peer"])   # the cause is known


def test_with_node_agents_only_a_rank_gone_from_a_running_node_is_waited_for():
    """Seen in CI (tests/cluster/test_nodes.py): rank 1 SIGKILLed while rank 0 was in the all-reduce; rank 0's gloo
    'Connection reset by peer' was read 46 ms later, before rank 1's exit record, and collective-timeout fired."""
    from engine.core.state import NodeStatus

    def group(rank1_alive: bool, agent1_alive: bool = True, lost: bool = False) -> RanksStatus:
        return RanksStatus(world_size=2, ranks=[RankStatus(rank=0, node=0, pid=10, alive=True),
                                                RankStatus(rank=1, node=1, pid=11, alive=rank1_alive)],
                           nodes=[NodeStatus(node=0, pid=20, alive=True, ranks=[0]),
                                  NodeStatus(node=1, pid=21, alive=agent1_alive, lost=lost, ranks=[1])])

    peer_lost = ["[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:7589: Connection reset by peer"]
    assert awaiting_first_failure(group(rank1_alive=False), peer_lost)             # its record is on its way
    assert not awaiting_first_failure(group(rank1_alive=True), peer_lost)           # the node agents decide
    assert not awaiting_first_failure(group(rank1_alive=False, agent1_alive=False), peer_lost)   # a dead node
    assert not awaiting_first_failure(group(rank1_alive=False, lost=True), peer_lost)            # a lost host
    recorded = group(rank1_alive=False).model_copy(update={"ranks": [
        RankStatus(rank=0, node=0, pid=10, alive=True), RankStatus(rank=1, node=1, pid=11, alive=False, exit_code=-9)]})
    assert not awaiting_first_failure(recorded, peer_lost)                          # its end is known: decide
