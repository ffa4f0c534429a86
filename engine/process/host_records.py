"""Ranks on other hosts, as the watcher sees them: only through records on the shared filesystem (issue 28).

Across real hosts the watcher cannot see a remote rank's process (another host, another PID namespace:
its pid means nothing here). The per-host agent wrapper (engine/trainers/litgpt/host_agent.py) runs on
every host next to its torchrun agent and, every RECORD_INTERVAL_S, writes one HostRecord per rank of
its host into the launch's ranks folder (`host-rank-<n>.json`): the host's name, the rank, the rank's
own start time and pid (in its host's namespace), its process state as seen on its host, its last step,
and when the record was written. Those records are the only source of truth for a remote rank: a
record that stops being renewed means the host (or its wrapper) is gone; how old each one is goes into
the state snapshot (`state.trainer.ranks.ranks[].seconds_since_record`, `nodes[].seconds_since_record`).

Everything here is pure (reading the folder aside): no process is looked at.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from engine.process.record_pairs import read_record_pairs

RECORD_INTERVAL_S = 0.5     # how often a host's wrapper renews its records
# A rank's words for a peer that went away (gloo, NCCL, c10d): said at once when the peer's host dies, and
# also when only the peer process died. Which of the two is known only once that host renews its records
# (alive) or has not for STALE_S (lost): the node group holds such a line back until then (nodes.py).
LOST_PEER = re.compile(rb"[Cc]onnection closed by (remote )?peer|Connection reset by peer|"
                       rb"remote process exited or there was a network error|DistNetworkError|Broken pipe")
STALE_S = 4.0               # a record older than this: its host is lost (8 renewals missed)
MAX_RECORDS = 4096


class HostRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    host: str                           # the host's own name (its hostname)
    node: int                           # the node number (SLURM_NODEID): one torchrun agent per node
    rank: int
    pid: int                            # the rank's pid in its host's PID namespace (not this host's)
    started: float                      # the rank's own start time (its host's clock, shared here)
    # The rank's process, as seen on its host: "running", "stopped" (SIGSTOP) or "gone". `state` in records before, still read.
    status: str = Field(validation_alias=AliasChoices("status", "state"))
    step: int | None = None             # the rank's last optimizer step (its own heartbeat's)
    exit_code: int | None = None        # once gone: its exit as its recorder wrote it (negative: a signal)
    time: float                         # when this record was written
    allocation: str = ""                # SLURM's "<job id>.<restart count>" the host ran it in


class HostExit(BaseModel):
    """Written by a host's wrapper as it ends (its torchrun agent's exit)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    rank: int
    host: str
    node: int
    exit_code: int
    ended: float


def record_path(folder: Path, rank: int) -> Path:
    return Path(folder) / f"host-rank-{rank}.json"


def read_host_records(folder: Path | None) -> dict[int, HostRecord]:
    """Every rank's newest host record (a bad or foreign file is passed over)."""
    return read_record_pairs(folder, "host-rank", HostRecord, HostExit, "rank", MAX_RECORDS)[0]


def is_remote(host: str | None, this_host: str) -> bool:
    """PURE. A record of another host (an empty host: written on this one, before issue 28)."""
    return bool(host) and host != this_host


def remote_status(record: HostRecord | None, now: float, stale_s: float = STALE_S,
                 fallback: float | None = None) -> str | None:
    """PURE. A remote rank's process status from its host's record: 'running' or 'stopped' while the
    record is fresh; None (gone) when its host said so, or when the record is stale (its host is lost).
    No record yet (its wrapper renews every RECORD_INTERVAL_S): 'running' while the rank's own heartbeat,
    written at `fallback`, is fresh."""
    if record is None:
        return "running" if fallback is not None and now - fallback <= stale_s else None
    if now - record.time > stale_s:
        return None
    return record.status if record.status in ("running", "stopped") else None


def lost_hosts(records: dict[int, HostRecord], this_host: str, now: float, stale_s: float = STALE_S,
               current: str = "") -> dict[int, str]:
    """PURE. node -> host of every other host none of whose ranks' records was renewed within stale_s,
    while one of them still said its rank was there: that host is gone (power, kernel, its wrapper
    killed), whatever its ranks were doing. A host whose ranks all ended (said 'gone') is not lost; nor
    is one whose records are of another SLURM allocation than `current` (when given): SLURM ended that
    allocation and everything in it (a watcher of the next one finds them all stale)."""
    by_node: dict[int, list[HostRecord]] = {}
    for record in records.values():
        if current and record.allocation and record.allocation != current:
            continue
        if record.host != this_host:
            by_node.setdefault(record.node, []).append(record)
    lost = {}
    for node, recs in by_node.items():
        newest = max(recs, key=lambda r: r.time)
        if now - newest.time > stale_s and any(r.status != "gone" for r in recs):
            lost[node] = newest.host
    return lost


def record_ages(records: dict[int, HostRecord], now: float) -> dict[int, float]:
    """PURE. rank -> seconds since its host last renewed its record."""
    return {rank: round(max(0.0, now - record.time), 3) for rank, record in records.items()}


def allocation(environ: Mapping[str, str] | None = None) -> str:
    """"<job id>.<restart count>" of the SLURM allocation this runs in ("" outside SLURM)."""
    environ = os.environ if environ is None else environ
    job = environ.get("SLURM_JOB_ID", "")
    return f"{job}.{environ.get('SLURM_RESTART_COUNT', '0')}" if job else ""


def lost_in_allocation(records: dict[int, HostRecord], this_host: str, now: float, allocation: str,
                       stale_s: float = STALE_S) -> dict[int, str]:
    """PURE. Hosts lost (lost_hosts) in an earlier launch of this same SLURM allocation: starting the next
    launch on them would only fail; SLURM ends the allocation once it calls the node down, and requeues."""
    if not allocation:
        return {}
    return {node: host for node, host in lost_hosts(records, this_host, now, stale_s, allocation).items()
            if any(r.allocation == allocation for r in records.values() if r.node == node)}


def previous_launch_folder(folder: Path) -> Path | None:
    """The ranks folder of the launch before this one (`launches/launch-NNN/ranks`), if there is one."""
    folder = Path(folder)
    launch = folder.parent
    earlier = sorted(p for p in launch.parent.glob("launch-*") if p.name < launch.name)
    return earlier[-1] / folder.name if earlier else None


def peer_verdict(records: dict[int, HostRecord], this_host: str, since: float, now: float,
                 stale_s: float = STALE_S) -> str | None:
    """PURE. After a rank said its peer went away at `since`: 'lost' once another host is lost, 'alive' once
    every other host renewed a record after `since`, None while it is too early to tell."""
    if lost_hosts(records, this_host, now, stale_s):
        return "lost"
    newest: dict[int, float] = {}
    for record in records.values():
        if is_remote(record.host, this_host):
            newest[record.node] = max(record.time, newest.get(record.node, 0.0))
    return "alive" if newest and all(t > since for t in newest.values()) else None
