"""Ranks on other hosts judged only by their hosts' records (issue 28): the pure parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cluster.slurm import SlurmSettings, job_script
from engine.process.host_records import (LOST_PEER, STALE_S, HostRecord, allocation, peer_verdict, is_remote, lost_hosts, lost_in_allocation,
                                         previous_launch_folder, read_host_records, record_ages,
                                         record_path, remote_status)
from engine.process.nodes import NodeExit, NodeStart, nodes_status
from engine.process.ranks import RankHeartbeat, ranks_status, write_record
from engine.trainers.litgpt.host_agent import parse
from engine.trainers.litgpt.nodes import across_hosts, srun_argv

NOW = 1000.0


def rec(rank: int, host: str, node: int, status: str = "running", age: float = 0.2, step: int | None = 3) -> HostRecord:
    return HostRecord(host=host, node=node, rank=rank, pid=40 + rank, started=500.0, status=status, step=step,
                      time=NOW - age)


@pytest.mark.parametrize("record, fallback, expected", [
    (rec(1, "h2", 1), None, "running"),
    (rec(1, "h2", 1, status="stopped"), None, "stopped"),
    (rec(1, "h2", 1, status="gone"), None, None),
    (rec(1, "h2", 1, age=STALE_S + 0.1), None, None),              # its host stopped renewing it: lost
    (None, NOW - 1.0, "running"),                                 # no record yet, its own heartbeat fresh
    (None, NOW - STALE_S - 1, None),
    (None, None, None),
])
def test_a_remote_ranks_status_comes_from_its_hosts_record_and_its_age(record, fallback, expected):
    assert remote_status(record, NOW, fallback=fallback) == expected


def test_a_host_is_lost_when_none_of_its_records_is_renewed_while_a_rank_was_there():
    records = {0: rec(0, "h1", 0, age=30), 1: rec(1, "h2", 1, age=STALE_S + 0.5), 2: rec(2, "h3", 2, age=0.1),
               3: rec(3, "h4", 3, status="gone", age=60)}
    # h1 is this host (its ranks are judged by their processes); h4's ranks all ended: not lost
    assert lost_hosts(records, "h1", NOW) == {1: "h2"}
    assert record_ages(records, NOW)[1] == pytest.approx(STALE_S + 0.5)
    assert is_remote("h2", "h1") and not is_remote("h1", "h1") and not is_remote("", "h1")


def test_a_lost_host_is_a_dead_node_named_by_its_host():
    starts = {0: NodeStart(node=0, pid=20, started=1.0, host="h1"), 1: NodeStart(node=1, pid=20, started=1.0, host="h2")}
    nodes, dead = nodes_status(starts, {}, {0: True, 1: False}, {0: 0, 1: 1}, lost={1: "h2"}, record_ages={1: 4.6})
    assert dead == [1] and nodes[1].lost and nodes[1].host == "h2" and nodes[1].seconds_since_record == 4.6
    assert not nodes[0].lost and nodes[0].alive
    # runbook's own stop of that node (its exit requested) is no loss
    ended = {1: NodeExit(node=1, pid=20, exit_code=-9, ended=NOW, requested=True)}
    assert nodes_status(starts, ended, {0: True}, {0: 0, 1: 1}, lost={1: "h2"})[1] == []


def test_a_remote_rank_carries_its_host_and_record_age_into_the_snapshot():
    beats = {r: RankHeartbeat(rank=r, world_size=2, node=r, pid=40 + r, started=500.0, time=NOW - 1, host=f"h{r + 1}")
             for r in (0, 1)}
    status = ranks_status(beats, {}, {0: "running", 1: "stopped"}, NOW, record_ages={1: 0.4})
    assert [(r.host, r.seconds_since_record, r.stopped) for r in status.ranks] == [("h1", None, False), ("h2", 0.4, True)]
    assert status.stopped == [1]


def test_host_records_are_read_from_the_ranks_folder(tmp_path: Path):
    write_record(record_path(tmp_path, 1), rec(1, "h2", 1))
    (tmp_path / "host-rank-2.json").write_text("{not json")
    write_record(record_path(tmp_path, 3), rec(4, "h2", 1))     # names another rank
    assert list(read_host_records(tmp_path)) == [1] and read_host_records(tmp_path / "missing") == {}


def test_agents_go_through_srun_only_inside_an_allocation_of_enough_hosts():
    assert across_hosts({"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2"}, 2)
    assert not across_hosts({"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1"}, 2)   # one host: local agents
    assert not across_hosts({"SLURM_JOB_NUM_NODES": "2"}, 2) and not across_hosts({"SLURM_JOB_ID": "7"}, 1)
    argv = srun_argv("py", 2, 1, "h1:5000", "abc", ["py", "-m", "entry"])
    assert argv[:6] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--export=ALL"]
    assert argv[argv.index("--"):] == ["--", "py", "-m", "entry"] and "engine.trainers.litgpt.host_agent" in argv
    options, command = parse(argv[argv.index("engine.trainers.litgpt.host_agent") + 1:])
    assert options == {"--nodes": "2", "--nproc-per-node": "1", "--endpoint": "h1:5000", "--rdzv-id": "abc"}
    assert command == ["py", "-m", "entry"]
    with pytest.raises(SystemExit, match="usage"):
        parse(["--nodes", "2", "--", "x"])


def test_a_several_node_job_asks_for_one_task_per_host():
    script = job_script(project_dir=Path("/p"), config_path=Path("/p/c.yaml"), runbook="rb", output=Path("/o"),
                        settings=SlurmSettings(), job_name="j", nodes=2)
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n" in script and "--ntasks=1" not in script
    one = job_script(project_dir=Path("/p"), config_path=Path("/p/c.yaml"), runbook="rb", output=Path("/o"),
                     settings=SlurmSettings(), job_name="j")
    assert "#SBATCH --ntasks=1\n" in one and "--nodes" not in one


def test_a_host_lost_in_this_allocations_previous_launch_is_not_started_on_again(tmp_path: Path):
    lost = rec(1, "h2", 1, age=STALE_S + 1).model_copy(update={"allocation": "7.0"})
    records = {0: rec(0, "h1", 0, age=30).model_copy(update={"allocation": "7.0"}), 1: lost}
    assert lost_in_allocation(records, "h1", NOW, "7.0") == {1: "h2"}
    assert lost_in_allocation(records, "h1", NOW, "7.1") == {}      # the requeued job's next allocation
    assert lost_in_allocation(records, "h1", NOW, "") == {}
    assert allocation({"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1"}) == "7.1" and allocation({}) == ""
    for n in (1, 2, 10):
        (tmp_path / "launches" / f"launch-{n:03d}" / "ranks").mkdir(parents=True)
    assert previous_launch_folder(tmp_path / "launches" / "launch-010" / "ranks") == tmp_path / "launches" / "launch-002" / "ranks"
    assert previous_launch_folder(tmp_path / "launches" / "launch-001" / "ranks") is None


def test_a_lost_peer_is_told_a_dead_process_or_a_lost_host_only_by_the_hosts_records():
    since = NOW - 1.0
    renewed = {0: rec(0, "h1", 0, age=9), 1: rec(1, "h2", 1, age=0.3)}       # h2 renewed after the line
    assert peer_verdict(renewed, "h1", since, NOW) == "alive"
    waiting = {0: rec(0, "h1", 0), 1: rec(1, "h2", 1, age=2.0)}              # not renewed since: too early
    assert peer_verdict(waiting, "h1", since, NOW) is None
    gone = {0: rec(0, "h1", 0), 1: rec(1, "h2", 1, age=STALE_S + 0.2)}
    assert peer_verdict(gone, "h1", since, NOW) == "lost"
    assert LOST_PEER.search(b"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.214.7.12]:7113")
    assert not LOST_PEER.search(b"Epoch 1 | iter 2 step 1 | loss train: 6.2")


def test_records_of_an_earlier_slurm_allocation_never_make_a_host_lost():
    old = {0: rec(0, "h1", 0, age=60).model_copy(update={"allocation": "7.0"}),
           1: rec(1, "h2", 1, age=60).model_copy(update={"allocation": "7.0"})}
    assert lost_hosts(old, "h1", NOW, current="7.1") == {}        # the next allocation's watcher re-attaching
    assert lost_hosts(old, "h1", NOW, current="7.0") == {1: "h2"}


def test_a_host_record_written_before_status_still_reads_its_process_status():
    # Records before issue 46 named it `state`; a new one writes `status`.
    old = HostRecord.model_validate({**rec(1, "h2", 1).model_dump(exclude={"status"}), "state": "stopped"})
    assert old.status == "stopped" and remote_status(old, NOW) == "stopped"
