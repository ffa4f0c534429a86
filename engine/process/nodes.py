"""Every node of a several-node trainer, as the engine sees it (issue 15).

One launcher agent (torchrun) per node starts that node's ranks. Whoever starts an agent (runbook's
node group, engine/trainers/litgpt/nodes.py) writes `node-<n>.json` (a NodeStart: its pid and start
time) into the launch's ranks folder (engine/process/ranks.py), and `node-<n>.exit.json` (a NodeExit) once it
reaped it. Each rank's heartbeat names its node (RUNBOOK_NODE). `nodes_status` is pure.

A dead node is an agent that ended by a signal that is no request to stop (SIGKILL, SIGSEGV, ...)
and that runbook did not end itself: the node's launcher is gone, whatever happened to its ranks.
A dead rank is a rank that failed while its agent lived on (or ended reporting it with an exit code).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import psutil
from pydantic import BaseModel, ConfigDict

from engine.core.state import NodeStatus
from engine.observe.launcher_report import signal_of
from engine.process.record_pairs import read_record_pairs

NODE_ENV = "RUNBOOK_NODE"          # in an agent's environment (and so its ranks'): the node's number
STOP_REQUESTS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")
MAX_NODES = 1024


class NodeStart(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    node: int
    pid: int
    started: float                      # psutil create_time: pids get reused
    host: str = ""


class NodeExit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    node: int
    pid: int
    exit_code: int                      # Popen's convention: negative for a signal
    ended: float
    requested: bool = False             # runbook ended it (a stop, or the leftovers of a finished group)
    notice: str | None = None           # a signal the agent said it got ("Received 15 death signal"), not from runbook


def start_path(folder: Path, node: int) -> Path:
    return Path(folder) / f"node-{node}.json"


def exit_path(folder: Path, node: int) -> Path:
    return Path(folder) / f"node-{node}.exit.json"


def read_nodes(folder: Path | None) -> tuple[dict[int, NodeStart], dict[int, NodeExit]]:

    return read_record_pairs(folder, "node", NodeStart, NodeExit, "node", MAX_NODES)


def agent_alive(start: NodeStart) -> bool:
    try:
        proc = psutil.Process(start.pid)
        return abs(proc.create_time() - start.started) <= 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


DEATH_SIGNAL = re.compile(r"Received (?:Signals\.)?(SIG[A-Z0-9]+|\d+) death signal")


def told_signal(log_tail: str) -> str | None:
    """PURE. The signal a torchrun agent says it got and forwarded to its workers (torch 2.13 logs
    'Received 15 death signal, shutting down workers'), from the tail of its output."""
    found = DEATH_SIGNAL.findall(log_tail)
    if not found:
        return None
    name = found[-1]
    if name.isdigit():
        try:
            return signal.Signals(int(name)).name
        except ValueError:
            return None
    return name


def nodes_status(starts: dict[int, NodeStart], exits: dict[int, NodeExit], alive: dict[int, bool],
                 rank_nodes: dict[int, int | None], lost: dict[int, str] | None = None,
                 record_ages: dict[int, float] | None = None) -> tuple[list[NodeStatus], list[int]]:
    """PURE. Every node and the dead ones. alive: node -> agent_alive() (another host's: its records are
    fresh); rank_nodes: rank -> its node; lost: node -> host of another host whose records stopped
    (engine/process/host_records.lost_hosts), dead whatever its agent's last word; record_ages: node ->
    age of its host's newest record."""
    lost, record_ages = lost or {}, record_ages or {}
    nodes, dead = [], []
    for node in sorted(set(starts) | set(exits) | set(lost)):
        start, end = starts.get(node), exits.get(node)
        code = end.exit_code if end else None
        status = NodeStatus(
            node=node, pid=start.pid if start else end.pid if end else None,
            alive=end is None and alive.get(node, False) and node not in lost,
            exit_code=code, signal=signal_of(code), requested=bool(end and end.requested), notice=end.notice if end else None,
            ranks=sorted(r for r, n in rank_nodes.items() if n == node),
            host=(start.host if start and start.host else lost.get(node)), lost=node in lost and not (end and end.requested),
            seconds_since_record=record_ages.get(node))
        nodes.append(status)
        if status.lost or (end is not None and not end.requested and status.signal is not None
                           and status.signal not in STOP_REQUESTS):
            dead.append(node)
    return nodes, dead
