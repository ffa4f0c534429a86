"""Several nodes (issue 15): 2 "nodes" as 2 real torchrun agents on 127.0.0.1 (c10d rendezvous, one
rank each, DDP over gloo), started by runbook's node group under one watcher. First the pure parts,
then one real run that suffers three faults one after another - a worker rank on node 1 SIGKILLed
(a dead rank), SIGTERM to node 1's agent (a preemption of one node's launcher), node 1's agent SIGKILLed
(a dead node) - and ends at the budget's exact counts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine.process.nodes import NodeExit, NodeStart, nodes_status, read_nodes, start_path, told_signal
from engine.process.ranks import RankHeartbeat, ranks_status, read_folder, write_record
from engine.trainers.litgpt.nodes import agent_argv, group_exit_code, parse
from tests.conftest import make_project, stop_process, wait_for

NOW = 1000.0


def start(node: int) -> NodeStart:
    return NodeStart(node=node, pid=200 + node, started=1.0)


def test_a_node_whose_agent_was_killed_is_dead_and_names_its_ranks():
    exits = {1: NodeExit(node=1, pid=201, exit_code=-9, ended=NOW)}
    nodes, dead = nodes_status({0: start(0), 1: start(1)}, exits, {0: True, 1: False}, {0: 0, 1: 1})
    assert dead == [1] and nodes[1].signal == "SIGKILL" and nodes[1].ranks == [1] and nodes[0].alive
    beats = {r: RankHeartbeat(rank=r, world_size=2, node=r, pid=100 + r, started=1.0, time=NOW) for r in (0, 1)}
    status = ranks_status(beats, {}, {0: "running", 1: "running"}, NOW, nodes=(nodes, dead))
    assert status.dead_nodes == [1] and [r.node for r in status.ranks] == [0, 1]


@pytest.mark.parametrize("code, requested", [(1, False), (-15, False), (-9, True), (0, False)])
def test_an_agent_that_reported_its_worker_or_was_stopped_is_no_dead_node(code, requested):
    """Exit 1: torchrun reporting a failed worker (a dead rank); SIGTERM: a notice; runbook's own kill."""
    exits = {1: NodeExit(node=1, pid=201, exit_code=code, ended=NOW, requested=requested)}
    assert nodes_status({1: start(1)}, exits, {1: False}, {})[1] == []


def test_the_signal_an_agent_says_it_got_is_read_from_its_output():
    line = "W1130 14:47:50.491000 1985 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers"
    assert told_signal("x\n" + line + "\n") == "SIGTERM" and told_signal("Received Signals.SIGHUP death signal") == "SIGHUP"
    assert told_signal("Epoch 1 | iter 2") is None and told_signal("Received 99 death signal") is None


def test_the_group_exits_as_rank_0_did():
    assert group_exit_code(75, [1, 1]) == 75            # both ranks saved on the notice; torchrun says 1
    assert group_exit_code(-9, [1, 0]) == 137
    assert group_exit_code(None, [0, 0]) == 0 and group_exit_code(None, [0, -9]) == 1 and group_exit_code(None, []) == 1


def test_a_group_whose_ranks_all_exited_a_moment_ago_is_ending_not_failing():
    """Seen in a full run (session 12): both ranks had saved on node 1's notice and exited 75, node 0's agent
    was printing the rendezvous store's DistNetworkError on its way out, and `collective-timeout` fired on
    that noise before the agents' exits (and the notice) were recorded."""
    from engine.core.state import RanksStatus, RankStatus
    from engine.process.ranks import group_exit_pending

    def group(*ended):
        ranks = [RankStatus(rank=i, node=i, pid=100 + i, alive=t is None, exit_code=None if t is None else 75, ended_at=t)
                 for i, t in enumerate(ended)]
        return RanksStatus(world_size=len(ranks), ranks=ranks, exited=[r.rank for r in ranks if not r.alive])

    assert group_exit_pending(group(NOW - 1.0, NOW - 0.5), NOW)           # both gone just now: wait for the agents
    assert not group_exit_pending(group(NOW - 1.0, None), NOW)            # rank 1 still runs: decide as before
    assert not group_exit_pending(group(NOW - 30.0, NOW - 11.0), NOW)     # the launcher outlived them: decide
    assert not group_exit_pending(RanksStatus(), NOW)                     # one process: its own exit_pending


def test_each_agent_gets_a_c10d_rendezvous_and_records_its_worker():
    argv = agent_argv("py", 2, 1, "127.0.0.1:5000", "abc", Path("/r"), ["py", "-m", "entry"])
    assert "--rdzv-backend=c10d" in argv and "--rdzv-id=abc" in argv and "--max-restarts=0" in argv
    assert argv[argv.index("--no-python") + 1:] == ["py", "-m", "engine.trainers.litgpt.ranks", "--record-exit", "/r",
                                                      "--", "py", "-m", "entry"]


@pytest.mark.parametrize("argv", [[], ["--nodes", "2", "--"], ["--nodes", "x", "--nproc-per-node", "1", "--", "c"],
                                  ["--nodes", "0", "--nproc-per-node", "1", "--", "c"],
                                  ["--nodes", "2", "--nproc-per-node", "1", "--bogus", "1", "--", "c"]])
def test_a_bad_group_command_line_is_refused_with_its_usage(argv):
    with pytest.raises(SystemExit, match="usage"):
        parse(argv)


def test_the_group_refuses_to_start_without_a_ranks_folder():
    env = {k: v for k, v in os.environ.items() if k != "RUNBOOK_RANKS_DIR"}
    done = subprocess.run([sys.executable, "-m", "engine.trainers.litgpt.nodes", "--nodes", "2", "--nproc-per-node", "1",
                           "--", "true"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "RUNBOOK_RANKS_DIR is not set" in done.stderr


def test_a_bad_node_record_is_passed_over(tmp_path):
    write_record(start_path(tmp_path, 0), start(0))
    (tmp_path / "node-1.json").write_text("{not json")
    write_record(start_path(tmp_path, 2), start(3))          # names another node
    assert list(read_nodes(tmp_path)[0]) == [0] and read_nodes(tmp_path / "missing") == ({}, {})


# --- real: 2 torchrun agents, one rank each --------------------------------------------------------

# 10 240 tokens = 10 optimizer steps of 16 sequences x 64 tokens (2 ranks x 2 micro-batches x 4 sequences)
TWO_NODES = {"max_tokens": 10240, "save_interval": 2}
STEPS, ITERS = 10, 20
NOISE = ("rank-straggler", "slow-training")   # a loaded 2-core machine slows one rank for real


def ranks_dir(project, launch: int) -> Path:
    return project.run_dir / "launches" / f"launch-{launch:03d}" / "ranks"


def rank_on(project, launch: int, rank: int) -> RankHeartbeat | None:
    return read_folder(ranks_dir(project, launch))[0].get(rank)


PROGRESS_STEP = re.compile(r"\| iter \d+ step (\d+) \|")


def _past(project, launch: int, step: int) -> bool:
    """That launch has trained to that step or past it, as the watcher reads it (its log's progress lines), and
    both ranks and both agents are recorded. Not a heartbeat's step: a rank writes its first heartbeat with the step
    it resumed from, before training anything (in one CI run rank 1's said 7 while rank 0 had written none; in the
    next, both said 7 and the notice came before the launch's first progress line, so the watcher's step was 6)."""
    beats, _ = read_folder(ranks_dir(project, launch))
    agents, _ = read_nodes(ranks_dir(project, launch))
    if not (set(agents) >= {0, 1} and set(beats) >= {0, 1}):
        return False
    log = project.run_dir / "logs" / f"trainer-{launch:03d}.log"
    steps = [int(s) for s in PROGRESS_STEP.findall(log.read_text(errors="replace"))] if log.is_file() else []
    return bool(steps) and max(steps) >= step


def _agent(project, launch: int, node: int) -> NodeStart:
    return read_nodes(ranks_dir(project, launch))[0][node]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


@pytest.fixture(scope="module")
def faulted_nodes(tmp_path_factory, shared_data) -> dict:
    """One run, one fault per launch, all on node 1: its worker rank SIGKILLed (launch 1), its agent sent
    SIGTERM (launch 2), its agent SIGKILLed (launch 3); launch 4 finishes. The dead node comes last: its orphaned
    rank and rank 0 train on until runbook stops the group (~15 ms steps here: a whole budget can pass in that
    second), so the launch after it may resume anywhere up to the final step and train nothing."""
    project = make_project(tmp_path_factory.mktemp("nodes") / "project", shared_data, **TWO_NODES)
    project.set(trainer={"devices": 1, "num_nodes": 2,
                         "env": {"RUNBOOK_COLLECTIVE_TIMEOUT_S": "60", "GLOO_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "WARN"}})
    watcher = project.watch()
    found: dict = {"project": project, "procs": []}

    def fault(launch: int, step: int, what: str) -> tuple[NodeStart, RankHeartbeat]:
        wait_for(lambda: _past(project, launch, step), 240, interval=0.02, what=f"launch {launch} trained to step {step}")
        agent, rank = _agent(project, launch, 1), rank_on(project, launch, 1)
        found["procs"] += [psutil.Process(pid) for pid in (agent.pid, rank.pid, rank_on(project, launch, 0).pid,
                                                            _agent(project, launch, 0).pid)]
        found[f"{what}_env"] = _environ(rank.pid)
        found[f"{what}_at"] = time.time()
        return agent, rank

    try:
        agent, rank = fault(1, 3, "rank")                      # a checkpoint at step 2 exists by then
        found["rank"] = (agent.pid, rank.pid)
        os.kill(rank.pid, signal.SIGKILL)
        agent, rank = fault(2, 5, "term")
        found["term"] = (agent.pid, rank.pid)
        os.kill(agent.pid, signal.SIGTERM)
        agent, rank = fault(3, 8, "node")
        found["node"] = (agent.pid, rank.pid)
        os.kill(agent.pid, signal.SIGKILL)                     # the agent alone: its worker is orphaned
        wait_for(lambda: (project.run_dir / "launches" / "launch-004").is_dir(), 240, interval=0.02, what="launch 4")
        found["orphan_left"] = found["procs"][9].is_running()   # launch 3's rank 1, whose agent was killed
        found["rc"] = watcher.wait(timeout=400)
    finally:
        stop_process(watcher)
    return found


def incidents(project) -> list[dict]:
    return [i for i in project.incidents() if i["playbook"] not in NOISE]


def test_the_run_recovers_each_node_fault_by_its_own_playbook_to_the_exact_counts(faulted_nodes):
    project = faulted_nodes["project"]
    assert faulted_nodes["rc"] == 0, project.watch_output()
    assert [i["playbook"] for i in incidents(project)] == ["rank-died", "node-preempted", "node-died"]
    assert all(i["outcome"] == "recovered" for i in incidents(project))
    progress = project.final_progress()
    assert (progress["step_count"], progress["iter_num"]) == (STEPS, ITERS), progress
    # tokens: iter_num counts one rank's micro-batches; 2 ranks x 4 sequences x 64 tokens each
    assert progress["iter_num"] * 2 * 4 * 64 == TWO_NODES["max_tokens"]
    log = (project.run_dir / "logs" / "trainer-001.log").read_text()
    assert "torchrun c10d rendezvous" in log and log.count("| iter 2 step 1 |") == 1   # node 1's progress is in its own log


def test_a_killed_worker_on_node_1_is_one_dead_rank_incident(faulted_nodes):
    project = faulted_nodes["project"]
    died = incidents(project)[0]
    ranks = died["snapshot"]["trainer"]["ranks"]
    agent_pid, rank_pid = faulted_nodes["rank"]
    assert ranks["first_failed"] == 1 and ranks["first_failed_signal"] == "SIGKILL" and ranks["dead_nodes"] == []
    assert ranks["ranks"][1]["node"] == 1 and ranks["ranks"][1]["pid"] == rank_pid
    node1 = next(n for n in ranks["nodes"] if n["node"] == 1)
    assert node1["pid"] == agent_pid and node1["signal"] is None      # the agent lived on or reported it
    text = f"rank 1 (pid {rank_pid}) died first (SIGKILL) at step {ranks['ranks'][1]['step']}, on node 1, whose launcher agent was not lost"
    assert any(text in n for n in died["notes"]), died["notes"]
    assert text in project.run_log.read_text()


def test_a_killed_agent_is_a_dead_node_and_the_whole_group_restarts_with_no_orphan(faulted_nodes):
    project = faulted_nodes["project"]
    node = incidents(project)[2]
    agent_pid, orphan_pid = faulted_nodes["node"]
    ranks = node["snapshot"]["trainer"]["ranks"]
    assert ranks["dead_nodes"] == [1] and ranks["first_failed"] is None, ranks   # no rank had failed
    text = f"node 1 died: its launcher agent (pid {agent_pid}) ended by SIGKILL, with rank(s) 1 on it"
    assert any(text in n for n in node["notes"]), node["notes"]
    assert text in project.run_log.read_text()
    assert node["detected_at"] - faulted_nodes["node_at"] < 15
    # the killed agent's orphaned rank was stopped with the group (not left waiting in a barrier) ...
    assert faulted_nodes["procs"][9].pid == orphan_pid and not faulted_nodes["orphan_left"]
    # ... and no agent or rank of any faulted launch outlived the run
    left = [p for p in faulted_nodes["procs"] if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], left


def test_sigterm_to_node_1s_launcher_is_a_notice_every_rank_saves_on_with_no_step_lost(faulted_nodes):
    project = faulted_nodes["project"]
    notice = incidents(project)[1]
    assert notice["trainer_exit_code"] == 75 and notice["steps_lost"] == 0, notice
    ranks = notice["snapshot"]["trainer"]["ranks"]
    assert {r["exit_code"] for r in ranks["ranks"]} == {75} and ranks["dead_nodes"] == [] and ranks["noticed_nodes"] == [1]
    # Every rank finishes the step it is in, then saves it: the last step the watcher read, or the one after when
    # the notice came while that step was being computed.
    assert notice["step_at_failure"] >= 5 and notice["resumed_step"] - notice["step_at_failure"] in (0, 1), notice
    text = f"node 1's launcher agent (pid {faulted_nodes['term'][0]}) got SIGTERM and forwarded it to its rank(s) 1"
    assert any(text in n for n in notice["notes"]), notice["notes"]
    assert text in project.run_log.read_text()


def test_the_trainer_env_reaches_every_rank_of_every_node(faulted_nodes):
    for what in ("rank", "node", "term"):
        env = faulted_nodes[f"{what}_env"]
        assert env["GLOO_SOCKET_IFNAME"] == "lo" and env["NCCL_DEBUG"] == "WARN" and env["RUNBOOK_NODE"] == "1", what
        assert env["RUNBOOK_COLLECTIVE_TIMEOUT_S"] == "60" and "TORCHELASTIC_RUN_ID" in env
