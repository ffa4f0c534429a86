"""Every rank of a multi-rank trainer, as the engine sees it.

The contract with a trainer: the watcher names a folder in the launch's environment
(RANKS_DIR_ENV); each rank of a trainer that supports it writes `rank-<n>.json` there (a
RankHeartbeat, replaced atomically as it goes: pid, step, phase, time), and whoever reaps a rank's
process writes `rank-<n>.exit.json` (a RankExit). Rank 0 is the trainer process the launcher
parents (its exit comes from the launcher, engine/process/launcher.py); the others are children of rank 0
(Lightning starts them) or of another launcher's agent. Everything below reads those files and the
processes from outside; `ranks_status` turns them into the snapshot's RanksStatus and is pure.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import psutil
from pydantic import BaseModel, ConfigDict

from engine.observe.diagnosis import RankSample, straggler
from engine.observe.launcher_report import first_failure, is_peer_loss, signal_of
from engine.core.state import NodeStatus, RanksStatus, RankStatus
from engine.process.host_records import allocation, is_remote, lost_hosts, read_host_records, record_ages, remote_status
from engine.process.nodes import agent_alive, nodes_status, read_nodes
from engine.process.record_pairs import read_record_pairs

RANKS_DIR_ENV = "RUNBOOK_RANKS_DIR"
BEHIND_FLOOR_S = 5.0        # a rank behind the others for less than this is just slower at that instant
BEHIND_WORK_FACTOR = 20     # ... or for less than this many of its usual micro-batches
MAX_RANKS = 4096
GROUP_EXIT_WAIT_S = 10.0    # torchrun's agents end within a second or two of their last worker
PHASES = ("work", "sync")   # within one micro-batch: its own work, then the backward with the all-reduce


class RankHeartbeat(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    rank: int
    world_size: int
    node: int | None = None             # with several nodes: the node whose agent started it (engine/process/nodes.py)
    pid: int
    started: float                      # the process's start time (psutil create_time): pids get reused
    step: int | None = None
    iter_num: int | None = None
    phase: str = "work"
    time: float                         # when this heartbeat was written
    work_seconds: float | None = None   # median of its own work per micro-batch, recent ones
    host: str = ""                      # the host it runs on (its hostname): another host's pid means nothing here


class RankExit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    rank: int
    pid: int
    exit_code: int                      # Popen's convention: negative for a signal
    ended: float
    error: str | None = None            # the exception it ended with (runbook/rank_records.py, the trainer side)
    where: str | None = None            # file:line in the user's own code where that exception was raised


class RankException(BaseModel):
    """The exception a rank raised, written by the rank itself as it ends (the trainer side, where its ranks
    run under an exit recorder, which folds it into the rank's exit). The rank's own words, not its log's: on
    another host the log reaches this one through srun, over the very link whose loss may be the failure."""
    model_config = ConfigDict(frozen=True, extra="ignore")

    rank: int
    pid: int
    error: str


def exception_path(folder: Path, rank: int) -> Path:
    return Path(folder) / f"exception-{rank}.json"


def read_exception(folder: Path, rank: int, pid: int) -> str | None:
    """The error that process (that pid) recorded as rank `rank`, if any: a bad or another process's file is none."""
    try:
        record = RankException.model_validate_json(exception_path(folder, rank).read_bytes()[:64 * 1024])
    except (OSError, ValueError):
        return None
    return record.error if (record.rank, record.pid) == (rank, pid) else None


def heartbeat_path(folder: Path, rank: int) -> Path:
    return Path(folder) / f"rank-{rank}.json"


def exit_path(folder: Path, rank: int) -> Path:
    return Path(folder) / f"rank-{rank}.exit.json"


def write_record(path: Path, record: BaseModel) -> None:
    """Temp file + rename, no fsync: a heartbeat lives as long as the run, and a reader sees a whole one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(record.model_dump_json(), encoding="utf-8")
    os.replace(tmp, path)


def read_folder(folder: Path | None) -> tuple[dict[int, RankHeartbeat], dict[int, RankExit]]:
    """The ranks' newest heartbeats and recorded exits (a bad or foreign file is passed over)."""
    return read_record_pairs(folder, "rank", RankHeartbeat, RankExit, "rank", MAX_RANKS)


def process_status(beat: RankHeartbeat) -> str | None:
    """'running', 'stopped', or None when that process (that pid with that start time) is gone."""
    try:
        proc = psutil.Process(beat.pid)
        if abs(proc.create_time() - beat.started) > 1.0:
            return None
        status = proc.status()
    except psutil.Error:
        return None
    if status == psutil.STATUS_ZOMBIE:
        return None
    return "stopped" if status == psutil.STATUS_STOPPED else "running"


def ranks_status(beats: dict[int, RankHeartbeat], exits: dict[int, RankExit], statuses: dict[int, str | None],
                 now: float, rank0_exit: tuple[int, float] | None = None,
                 nodes: tuple[list[NodeStatus], list[int]] = ([], []),
                 record_ages: dict[int, float] | None = None) -> RanksStatus:
    """PURE. The snapshot's view of the ranks: statuses maps rank -> process_status(); rank0_exit is the
    trainer process's own (exit code, ended) when its launcher recorded it; nodes is
    engine/process/nodes.nodes_status() with several nodes (every node and the dead ones)."""
    node_list, dead_nodes = nodes
    noticed = [n.node for n in node_list if n.notice]
    if not beats:
        return RanksStatus(nodes=node_list, dead_nodes=dead_nodes, noticed_nodes=noticed)
    world = max(max(b.world_size for b in beats.values()), max(beats) + 1)
    if world <= 1:
        return RanksStatus(nodes=node_list, dead_nodes=dead_nodes, noticed_nodes=noticed)
    ranks = []
    for rank in range(world):
        beat = beats.get(rank)
        gone = beat is not None and statuses.get(rank) is None
        code, ended, error, where = None, None, None, None
        if rank in exits:
            code, ended, error, where = exits[rank].exit_code, exits[rank].ended, exits[rank].error, exits[rank].where
        elif rank == 0 and rank0_exit is not None:
            code, ended = rank0_exit
        ranks.append(RankStatus(
            rank=rank, node=beat.node if beat else None, pid=beat.pid if beat else None, alive=beat is not None and not gone,
            stopped=statuses.get(rank) == "stopped", exit_code=code, signal=signal_of(code), ended_at=ended,
            step=beat.step if beat else None, iter_num=beat.iter_num if beat else None,
            phase=beat.phase if beat else None,
            seconds_since_heartbeat=round(now - beat.time, 3) if beat else None,
            work_seconds=beat.work_seconds if beat else None, host=(beat.host or None) if beat else None,
            seconds_since_record=(record_ages or {}).get(rank), error=error, where=where,
            peer_loss=is_peer_loss(error)))
    failed = [r for r in ranks if r.exit_code not in (None, 0)]
    first = first_failure(ranks, None)
    stopped = [r.rank for r in ranks if r.stopped]
    slow = straggler([RankSample(rank=r.rank, pid=r.pid, work_seconds=r.work_seconds) for r in ranks if r.alive])
    slow_s = slow[0].work_seconds if slow else None   # set: straggler() picks among the timed ranks only
    return RanksStatus(
        world_size=world, ranks=ranks,
        exited=[r.rank for r in ranks if r.pid is not None and not r.alive],
        failed=[r.rank for r in failed], first_failed=first.rank if first else None,
        first_failed_signal=first.signal if first else None,
        first_failed_exit_code=first.exit_code if first else None,
        first_failed_error=first.error if first else None, first_failed_where=first.where if first else None,
        first_failed_peer_loss=bool(first and first.peer_loss),
        stopped=stopped, stalled=sorted(set(stopped) | set(_behind(ranks))),
        straggler=slow[0].rank if slow else None,
        straggler_ratio=round(slow_s / slow[1], 2) if slow and slow_s is not None else None,
        nodes=node_list, dead_nodes=dead_nodes, noticed_nodes=noticed,
    )


def group_exit_pending(status: RanksStatus, now: float, wait_s: float = GROUP_EXIT_WAIT_S) -> bool:
    """PURE. Every rank of a group has exited, a moment ago, while its launcher (torchrun, one agent per
    node) still runs: the group is ending, and what its agents print meanwhile (the rendezvous store going
    away: DistNetworkError, "Connection was likely closed") is the shutdown's noise, not a collective that
    failed. Decide on the group's exit instead, unless the launcher outlives its ranks by wait_s."""
    if status.world_size <= 1 or len(status.exited) < status.world_size:
        return False
    ended = [r.ended_at for r in status.ranks if r.ended_at is not None]
    return len(ended) == len(status.ranks) and now - max(ended) < wait_s


def _behind(ranks: list[RankStatus]) -> list[int]:
    """Live ranks the others wait for: still on an earlier micro-batch (or phase) than the most advanced
    live rank, for longer than a micro-batch's work could explain."""
    live = [r for r in ranks if r.alive and r.iter_num is not None]
    if len(live) < 2:
        return []

    def position(r: RankStatus) -> tuple[int, int]:
        assert r.iter_num is not None   # live ranks only
        return r.iter_num, PHASES.index(r.phase) if r.phase in PHASES else 0

    lead = max(position(r) for r in live)
    found = []
    for r in live:
        patience = max(BEHIND_FLOOR_S, BEHIND_WORK_FACTOR * (r.work_seconds or 0.0))
        if position(r) < lead and (r.seconds_since_heartbeat or 0.0) >= patience:
            found.append(r.rank)
    return found


class RankWatch:
    """The ranks of one launch: reads their folder, checks their processes, stops the leftovers."""

    def __init__(self, folder: Path | None):
        self.folder = folder

    def status(self, rank0_exit: tuple[int, float] | None = None) -> RanksStatus:
        """Ranks and agents of this host by their processes; those of another host (issue 28) only by the
        records its agent wrapper renews on the shared filesystem (engine/process/host_records.py)."""
        beats, exits = read_folder(self.folder)
        records = read_host_records(self.folder)
        host, now = socket.gethostname(), time.time()
        statuses = {rank: (remote_status(records.get(rank), now, fallback=beat.time) if is_remote(beat.host, host)
                         else process_status(beat)) for rank, beat in beats.items()}
        starts, ends = read_nodes(self.folder)
        if not (starts or ends):
            return ranks_status(beats, exits, statuses, now, rank0_exit)
        lost = lost_hosts(records, host, now, current=allocation())
        node_ages: dict[int, float] = {}
        for record in records.values():
            if is_remote(record.host, host):
                age = round(now - record.time, 3)
                node_ages[record.node] = min(age, node_ages.get(record.node, age))
        alive = {n: (n not in lost if is_remote(s.host, host) else agent_alive(s)) for n, s in starts.items()}
        nodes = nodes_status(starts, ends, alive, {rank: beat.node for rank, beat in beats.items()}, lost, node_ages)
        remote_ages = {r: a for r, a in record_ages(records, now).items() if is_remote(records[r].host, host)}
        return ranks_status(beats, exits, statuses, now, rank0_exit, nodes, remote_ages)

    def stop_leftovers(self, wait_s: float = 5.0) -> list[str]:
        """SIGKILL to every rank process of this launch still there once rank 0 is gone or being
        replaced (a stopped rank outlives rank 0 and holds its port and memory; with its process group
        broken it has nothing left to save). Only processes whose pid and start time match a
        heartbeat: never someone else's."""
        beats, _ = read_folder(self.folder)
        host = socket.gethostname()   # another host's ranks are its agent wrapper's to kill (srun forwards the stop)
        left = {rank: beat for rank, beat in beats.items()
                if not is_remote(beat.host, host) and process_status(beat) is not None}
        for beat in left.values():
            _signal(beat.pid, signal.SIGKILL)
        # With several nodes, the launcher agents too (a killed node group leaves them waiting in a barrier).
        agents = [start for start in read_nodes(self.folder)[0].values()
                  if not is_remote(start.host, host) and agent_alive(start)]
        for start in agents:
            _signal(start.pid, signal.SIGKILL)
        deadline = time.monotonic() + wait_s
        waiting = dict(left)
        while waiting and time.monotonic() < deadline:
            waiting = {rank: beat for rank, beat in waiting.items() if process_status(beat) is not None}
            time.sleep(0.02)
        return ([f"rank {rank} (pid {beat.pid})" for rank, beat in sorted(left.items())]
                + [f"node {start.node}'s agent (pid {start.pid})" for start in agents])


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
