"""PURE. Which rank failed first, from every rank's own records and its launcher's report.

When one rank of a group dies, its peers fail a moment later of the broken collective ("Connection
closed by peer ... typically caused by a remote worker crashing"), and the launcher tears the rest down
(SIGTERM) and then prints its summary. Deciding on the first line seen takes a follower's symptom for the
cause. The launcher's report says what each rank ended with (torchrun's and accelerate's ChildFailedError
block with its `Root Cause (first observed failure)`, deepspeed's `exits with return code`, srun's
`task N: ...`), torchrun prefixes each rank's output with `[rankN]:`, and runbook's own trainer side
(runbook/rank_records.py) records each rank's exception with its time and, in the user's code, file:line.

`read_report` reads the log's tail; `with_report` merges it into the ranks' status and picks the first
failure: a follower (a lost peer, or the launcher's own SIGTERM of a survivor) never when another rank
failed of something else; then the earliest recorded end; then the launcher's root cause.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field

from engine.core.state import RankStatus, RanksStatus

# A collective's report that a peer went away: what a surviving rank prints after another died.
PEER_LOSS = re.compile(
    r"[Cc]onnection (closed|reset) by (remote )?peer|remote (worker|process) (crashing|exited)|Broken pipe"
    r"|NCCL communicator was aborted|DistNetworkError|ncclRemoteError|remote process exited or there was a network error"
    r"|Timed out waiting \d+ms for (send|recv)|Socket Timeout|[Tt]he client socket has (timed out|shut down)")
MAX_LINE = 2000
TEARDOWN_CRASHES = (-6, -11)    # SIGABRT, SIGSEGV: what an interpreter's own teardown dies of, no outside kill

_ROOT = re.compile(r"^\s*Root Cause \(first observed failure\):")
_FAILURES = re.compile(r"^\s*Failures:\s*$")
_ENTRY_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)(?: \(local_rank: (\d+)\))?")
_ENTRY_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_ENTRY_TRACE = re.compile(r"^\s*traceback\s*:\s*(.*)$")
_BLOCK_END = re.compile(r"^\s*(=|-){6,}\s*$")
_EARLY = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: \d+\)")
_DEEPSPEED = re.compile(r"--local_rank=(\d+).{0,400}exits with return code = (-?\d+)")
_SRUN = re.compile(r"srun: error: \S+: tasks? (\d+): (Killed|Segmentation fault|Bus error|Aborted|Exited with exit code (\d+))")
_RANK_ERROR = re.compile(r"^\[(?:default)?rank(\d+)\]:\s*((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt)\b.*)$")
_NO_TRACE = re.compile(r"^(Signal \d+|To enable traceback|<N/A>|N/A)")
_SRUN_SIGNALS = {"Killed": -signal.SIGKILL, "Segmentation fault": -signal.SIGSEGV, "Bus error": -signal.SIGBUS,
                 "Aborted": -signal.SIGABRT}


@dataclass(frozen=True)
class ReportedFailure:
    rank: int
    exit_code: int
    error: str | None = None     # the launcher's traceback field, when it carries the rank's own error


@dataclass(frozen=True)
class LauncherReport:
    failures: dict[int, ReportedFailure] = field(default_factory=dict)
    root_cause: int | None = None                                    # the launcher's "first observed failure"
    errors: dict[int, str] = field(default_factory=dict)             # each rank's last error line ([rankN]: ...)

    @property
    def empty(self) -> bool:
        return not (self.failures or self.errors)


def is_peer_loss(text: str | None) -> bool:
    return text is not None and PEER_LOSS.search(text[:MAX_LINE]) is not None


def read_report(lines: list[str]) -> LauncherReport:
    """The launcher's summary and the ranks' prefixed error lines, from a log's tail."""
    failures: dict[int, ReportedFailure] = {}
    errors: dict[int, str] = {}
    root: int | None = None
    section: str | None = None                  # "root" or "failures" while inside torchrun's block
    entry: dict = {}

    def close_entry() -> None:
        nonlocal root
        if "rank" in entry and "exit" in entry:
            failures[entry["rank"]] = ReportedFailure(entry["rank"], entry["exit"], entry.get("error"))
            if section == "root":
                root = entry["rank"]
        entry.clear()

    for raw in lines:
        line = raw[:MAX_LINE]
        if _ROOT.match(line) or _FAILURES.match(line):
            close_entry()
            section = "root" if _ROOT.match(line) else "failures"
            continue
        if section is not None:
            if _BLOCK_END.match(line):
                close_entry()
                section = None if line.strip().startswith("=") else section
                continue
            if m := _ENTRY_RANK.match(line):
                close_entry()
                entry["rank"] = int(m.group(1))
            elif m := _ENTRY_EXIT.match(line):
                entry["exit"] = int(m.group(1))
            elif (m := _ENTRY_TRACE.match(line)) and not _NO_TRACE.match(m.group(1).strip()):
                entry["error"] = m.group(1).strip()[:500]
            continue
        if m := _EARLY.search(line):
            rank = int(m.group(2))
            failures.setdefault(rank, ReportedFailure(rank, int(m.group(1))))
        elif m := _DEEPSPEED.search(line):
            rank = int(m.group(1))
            failures.setdefault(rank, ReportedFailure(rank, int(m.group(2))))
        elif m := _SRUN.search(line):
            rank = int(m.group(1))
            code = int(m.group(3)) if m.group(3) else _SRUN_SIGNALS[m.group(2)]
            failures.setdefault(rank, ReportedFailure(rank, code))
        elif m := _RANK_ERROR.match(line):
            errors[int(m.group(1))] = m.group(2).strip()[:500]
    close_entry()
    return LauncherReport(failures, root, errors)


def signal_of(code: int | None) -> str | None:
    """Popen's negative exit code -> the signal's name (the ranks', the nodes' and the launcher's reports)."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return None


def _merged_rank(status: RankStatus, report: LauncherReport) -> RankStatus:
    reported = report.failures.get(status.rank)
    update: dict = {}
    # The launcher reaped the process: its code is the truth where the rank's own record is missing or is only
    # the clean-exit guess of an interpreter that was then killed. Not an abort of its own after a recorded
    # return: the record (exit 0) is written once the script has returned, so a SIGABRT or SIGSEGV after it is
    # the interpreter's teardown (`terminate called without an active exception`: a process group never
    # destroyed, seen on torch 2.13), and the return while its peers trained is what decides.
    torn_down = status.exit_code == 0 and reported is not None and reported.exit_code in TEARDOWN_CRASHES
    if reported is not None and not torn_down and (status.exit_code in (None, 0) or reported.exit_code not in (0, 1)):
        update.update(exit_code=reported.exit_code, signal=signal_of(reported.exit_code), alive=False,
                      exit_from_launcher=True)
    error = status.error or (reported.error if reported else None) or report.errors.get(status.rank)
    if error is not None:
        update.update(error=error, peer_loss=is_peer_loss(error))
    return status.model_copy(update=update) if update else status


def _failed(r: RankStatus) -> bool:
    return r.exit_code is not None and r.exit_code != 0


def first_failure(ranks: list[RankStatus], root_cause: int | None) -> RankStatus | None:
    """The rank whose failure the others followed. A rank that ended 0 counts when a peer failed after it
    (it left its group early). Followers (a lost peer, a SIGTERM a launcher sends survivors) come last."""
    failed = [r for r in ranks if _failed(r)]
    ended_times = [r.ended_at for r in failed if r.ended_at is not None]
    early = [r for r in ranks if r.exit_code == 0 and r.ended_at is not None and ended_times
             and r.ended_at < min(ended_times)]
    candidates = failed + early
    if not candidates:
        return None
    leaders = [r for r in candidates if not (r.peer_loss or r.signal == "SIGTERM")]

    def order(r: RankStatus) -> tuple:
        follower = r not in leaders if leaders else False
        return (follower, r.ended_at is None, r.ended_at or 0.0, r.rank != root_cause, r.rank)

    return min(candidates, key=order)


def with_report(status: RanksStatus, report: LauncherReport, trainer_pid: int | None = None) -> RanksStatus:
    """The ranks' status with the launcher's report merged in and the first failure chosen again. Ranks the
    report names that wrote no heartbeat (a script without runbook's trainer side) are added from it."""
    ranks = [_merged_rank(r, report) for r in status.ranks]
    known = {r.rank for r in ranks}
    for rank in sorted(set(report.failures) - known):
        f = report.failures[rank]
        error = f.error or report.errors.get(rank)
        ranks.append(RankStatus(rank=rank, exit_code=f.exit_code, signal=signal_of(f.exit_code), error=error,
                                peer_loss=is_peer_loss(error), exit_from_launcher=True))
    ranks.sort(key=lambda r: r.rank)
    if not ranks:
        return status
    first = first_failure(ranks, report.root_cause)
    rank0 = next((r for r in ranks if r.rank == 0), None)
    under_launcher = status.under_launcher or bool(report.failures) or (
        rank0 is not None and rank0.pid is not None and trainer_pid is not None and rank0.pid != trainer_pid)
    return status.model_copy(update={
        "world_size": max(status.world_size, max(r.rank for r in ranks) + 1), "ranks": ranks,
        "exited": sorted(set(status.exited) | {r.rank for r in ranks if r.exit_code is not None}),
        "failed": [r.rank for r in ranks if _failed(r)],
        "first_failed": first.rank if first else None,
        "first_failed_signal": first.signal if first else None,
        "first_failed_exit_code": first.exit_code if first else None,
        "first_failed_error": first.error if first else None,
        "first_failed_where": first.where if first else None,
        "first_failed_peer_loss": bool(first and first.peer_loss),
        "under_launcher": under_launcher,
    })


def awaiting_first_failure(status: RanksStatus, tail: list[str]) -> bool:
    """PURE. While the launcher lives: a rank is gone with no known end, or only lost peers are reported, so
    the cause is not known yet. With runbook's own node agents (engine/process/nodes.py decides a node's end),
    only a rank gone from a node whose agent still runs: its exit record comes within milliseconds (the agent's
    worker is the --record-exit wrapper), and deciding before it reads its peers' lost-peer errors as a
    collective timeout (seen in CI: rank 1 SIGKILLed mid-all-reduce, collective-timeout instead of rank-died).
    A node whose agent died, or whose host is lost, is not waited for: that is a dead node, decided at once."""
    unexplained = [r for r in status.ranks if not r.alive and r.pid is not None and r.exit_code is None]
    if status.nodes:
        running = {n.node for n in status.nodes if n.alive and not n.lost}
        return any(r.node in running for r in unexplained)
    if unexplained:
        return True
    first = next((r for r in status.ranks if r.rank == status.first_failed), None)
    if first is not None and not first.peer_loss and first.signal != "SIGTERM":
        return False   # a rank failed of its own cause: that decides
    return first is not None or any(is_peer_loss(line) for line in tail[-50:])
