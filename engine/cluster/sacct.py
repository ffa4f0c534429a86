"""How each allocation of a SLURM job ended, as the accounting database (sacct) says: the pure parser
(issue 28). engine/cluster/slurm_commands.sacct_ends runs the command; `runbook status` shows the answer
beside each allocation the run folder records.

    sacct -j ID[,ID...] --duplicates -X --parsable2 --noheader --format=JobID,State,Start,End,NodeList,ExitCode

--duplicates lists every allocation of a requeued job (one row each, oldest first per job); -X leaves
the steps out. Real output: tests/data/sacct/two_hosts.txt (the two-host cluster of the tests).
"""

from __future__ import annotations

from dataclasses import dataclass

FORMAT = "JobID,State,Start,End,NodeList,ExitCode"

# sacct's State (its first word: "CANCELLED by 0") -> how the allocation ended, in words
ENDINGS = {
    "NODE_FAIL": "node failure",
    "PREEMPTED": "preemption",
    "TIMEOUT": "time limit",
    "DEADLINE": "deadline",
    "CANCELLED": "cancellation",
    "REQUEUED": "requeued",
    "REQUEUE_FED": "requeued",
    "REQUEUE_HOLD": "requeued (held)",
    "BOOT_FAIL": "boot failure",
    "OUT_OF_MEMORY": "out of memory",
    "FAILED": "failed",
    "COMPLETED": "completed",
    "RUNNING": "running",
    "PENDING": "pending",
    "SUSPENDED": "suspended",
}


@dataclass(frozen=True)
class AllocationEnd:
    job_id: str
    state: str              # sacct's State, first word (NODE_FAIL, PREEMPTED, CANCELLED, ...)
    ending: str             # ENDINGS' words for it ("node failure", "preemption", "time limit", "cancellation")
    start: str
    end: str                # "Unknown" while running
    nodes: str
    exit_code: str          # "code:signal"
    by: str | None = None   # "CANCELLED by 0": the uid that cancelled it


def parse_allocation_ends(text: str) -> list[AllocationEnd]:
    """PURE. Every allocation row of sacct's answer (FORMAT, --parsable2), in its order; steps (IDs with a
    dot), array/het suffixes, headers and malformed lines are passed over."""
    rows = []
    for line in text.splitlines():
        cells = line.strip().split("|")
        if len(cells) < 6 or not cells[0].isdigit():
            continue
        words = cells[1].split()
        if not words:
            continue
        state = words[0].rstrip("+")
        by = words[2] if len(words) >= 3 and words[1] == "by" else None
        rows.append(AllocationEnd(job_id=cells[0], state=state, ending=ENDINGS.get(state, state.lower()),
                                  start=cells[2], end=cells[3], nodes=cells[4], exit_code=cells[5], by=by))
    return rows


def by_allocation(rows: list[AllocationEnd]) -> dict[tuple[str, int], AllocationEnd]:
    """PURE. (job id, restart count) -> its row: a job's rows, ordered by start, are its allocations 0, 1, ..."""
    found: dict[tuple[str, int], AllocationEnd] = {}
    jobs: dict[str, list[AllocationEnd]] = {}
    for row in rows:
        jobs.setdefault(row.job_id, []).append(row)
    for job_id, job_rows in jobs.items():
        for restart, row in enumerate(sorted(job_rows, key=lambda r: r.start)):
            found[(job_id, restart)] = row
    return found


def describe(row: AllocationEnd) -> str:
    """PURE. One phrase for `runbook status`: 'sacct: NODE_FAIL (node failure) on h[1-2]'."""
    who = f" by uid {row.by}" if row.by else ""
    code = f", exit {row.exit_code}" if row.exit_code not in ("0:0", "") else ""
    return f"sacct: {row.state} ({row.ending}{who}) on {row.nodes}{code}"
