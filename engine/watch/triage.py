"""Triage: what the watcher would decide for a log that did not run under it (`runbook triage`).

A user pastes a log (a run not under runbook, a colleague's) and how it ended. The snapshot is made
by the watcher's own parts, in the order `runbook watch --dry-run` judges a run folder whose trainer
is gone (engine/watch/dry_run.py): the Observer reads the log's lines through the trainer adapter's
parser into the same metrics and tail, the exit is normalised as the launcher's is, then the pure
`decide` and `plan` run. There is no second matcher: only what a log cannot tell is left unknown
(no process, no checkpoint folder, not this machine's disk), and each unknown is named.

Reads only the LOG, at most its last TAIL_BYTES, and writes nothing anywhere.
"""

from __future__ import annotations

import re
import signal as signals
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.core.bounded_read import regular_file, shown
from engine.core.config import RunConfig
from engine.core.errors import SourceError
from engine.core.evidence import Evidence
from engine.core.state import CheckpointStatus, DiskStatus, RunPhase, StateSnapshot, TrainerStatus
from engine.language.clauses import Explanation, MatchContext, walk
from engine.language.matcher import Decision, MatchMemory, decide
from engine.language.planner import PlannedStep, plan
from engine.language.playbook import Playbook
from engine.observe.events import Progress
from engine.observe.evidence import EvidenceGatherer
from engine.observe.observer import MAX_LINE_BYTES, MAX_READ_BYTES, Observer
from engine.observe.other_stacks import other_stack_progress
from engine.observe.throughput import progress_meaning_of
from engine.process.trainer_process import exit_from_launcher, signal_name
from engine.language import ladder
from engine.records.attempts import AttemptHistory
from engine.trainers.base import TrainerAdapter

TAIL_BYTES = MAX_READ_BYTES   # what one observation of the watcher reads at most; a longer log: its end
PID_UNKNOWN = None

# What a log cannot show, by the clause kind that would need it.
NEEDS = {
    "disk": "disk free space unknown: not this machine's run, so no disk clause holds",
    "checkpoint": "no checkpoint folder to verify: no checkpoint counts as corrupt",
    "stalled": "no live trainer: a stall (hang) is judged on a running process, never on a log",
}


EXIT_MIN, EXIT_MAX = -64, 255   # Popen's -N for signal N (Linux has 64), or a process's 8-bit status


class ExitUnknown(ValueError):
    """--signal NAME names no signal, or --exit N is no exit status."""


def parse_exit(text: str) -> int:
    """--exit's value: an integer from -64 to 255 (ExitUnknown otherwise: 256, 1e20, 1.5, 'abc')."""
    value = text.strip()
    if not re.fullmatch(r"[+-]?\d{1,4}", value) or not EXIT_MIN <= int(value) <= EXIT_MAX:
        raise ExitUnknown(f"--exit {text[:40]}: an exit status is an integer from {EXIT_MIN} to {EXIT_MAX} "
                          "(137 is SIGKILL as a shell shows it, -9 as Popen does)")
    return int(value)


@dataclass(frozen=True)
class Ending:
    """How the trainer ended, in the watcher's convention: a negative code for a signal (Popen's)."""

    code: int | None
    signal: str | None
    given: str                    # as the user gave it (or as inferred), for the output
    inferred: str | None = None   # not given: what in the log it was read from

    @property
    def known(self) -> bool:
        return self.code is not None or self.signal is not None


def ending(exit_code: int | None = None, signal_arg: str | None = None) -> Ending:
    """--exit N (a shell's 128+N is a signal, as the launcher mirrors it) or --signal NAME; neither: unknown."""
    if exit_code is not None and not (isinstance(exit_code, int) and EXIT_MIN <= exit_code <= EXIT_MAX):
        raise ExitUnknown(f"--exit {exit_code}: an exit status is an integer from {EXIT_MIN} to {EXIT_MAX}")
    if signal_arg is not None:
        name = signal_arg.strip().upper()
        name = name if name.startswith("SIG") else "SIG" + name
        try:
            number = signals.Signals[name].value
        except KeyError:
            raise ExitUnknown(f"--signal {signal_arg}: no such signal (e.g. SIGTERM, SIGKILL, SIGABRT)") from None
        return Ending(-number, name, f"signal {name}")
    if exit_code is None:
        return Ending(None, None, "unknown (no --exit or --signal)")
    if exit_code < 0:
        return Ending(exit_code, signal_name(exit_code), f"exit {exit_code}")
    normal = exit_from_launcher(exit_code)   # 137 -> -9 (SIGKILL), 1 -> 1: how the watcher records it
    assert normal is not None                # None only for a negative code, handled above
    return Ending(normal["exit_code"], normal["signal"], f"exit {exit_code}")


# How a log that ends in a failure says so, when nobody gave the exit. Python prints the traceback of an
# uncaught exception last and exits 1; torchrun and deepspeed end with their summary and exit 1 too.
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
_EXCEPTION = re.compile(r"^(\[rank\d{1,6}\]: ?)?([A-Za-z_][\w.]{0,200})(Error|Exception|Failure|Interrupt)\b")
_LAUNCHER_SUMMARY = re.compile(r"ChildFailedError|exits with return code = [1-9]|srun: error: \S+: tasks? [\d,-]+: Exited with exit code [1-9]")
INFER_WITHIN = 40   # the failure's last lines: what a traceback's end may be followed by (launcher noise)
EXCEPTION_LAST = 8  # an exception line with no traceback header: only among the log's last lines (its wrapped message)


def infer_ending(lines: list[str], adapter: TrainerAdapter) -> Ending | None:
    """PURE. The exit a log's own ending shows when none was given: a Python traceback ending in an exception
    (or an exception line as the log's very end), or a launcher's failure summary, with no progress line after it: the trainer died, non-zero (exit 1 as
    Python and the launchers give it; a KeyboardInterrupt is SIGINT). None when the log does not say."""
    last = _after_last_progress(lines, adapter)[-INFER_WITHIN:]   # a progress line after it: still training
    for line in reversed(last):
        if _LAUNCHER_SUMMARY.search(line[:4096]):
            return Ending(1, None, "exit 1 (inferred)", inferred="its launcher's failure summary at the log's end")
    seen_traceback = any(_TRACEBACK.search(line[:4096]) for line in last)
    # With its `Traceback` header anywhere in the ending; without one (a paste cut to the error), as the very end.
    window = last if seen_traceback else last[-EXCEPTION_LAST:]
    exceptions = [m for line in window if (m := _EXCEPTION.match(line[:4096].strip()))]
    if not exceptions:
        return None
    if exceptions[-1].group(2) + exceptions[-1].group(3) == "KeyboardInterrupt":
        return Ending(-2, "SIGINT", "signal SIGINT (inferred)", inferred="a KeyboardInterrupt traceback at the log's end")
    what = "a Python traceback" if seen_traceback else f"an uncaught exception ({exceptions[-1].group(2)}{exceptions[-1].group(3)})"
    return Ending(1, None, "exit 1 (inferred)", inferred=f"{what} at the log's end (an uncaught exception exits 1)")


@dataclass
class LogRead:
    lines: list[str]
    size: int             # the file's size when read
    read: int             # bytes read (its end)

    @property
    def skipped(self) -> int:
        return self.size - self.read


def read_log(path: Path, tail_bytes: int = TAIL_BYTES) -> LogRead:
    """The last tail_bytes of a regular file as lines, cut and decoded as the watcher's LogTail does
    (a line over MAX_LINE_BYTES is cut, bytes that are not UTF-8 become U+FFFD), plus a last line with no
    newline (a pasted log often ends without one). SourceError when it cannot be read."""
    info = regular_file(path)   # refuses a folder, a FIFO, a device, a missing path, before any open
    start = max(0, info.st_size - tail_bytes)
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read(tail_bytes)
    except OSError as err:
        raise SourceError([f"{shown(path)}: cannot read: {err.strerror or err}"]) from None
    pieces = data.split(b"\n")
    if start > 0 and len(pieces) > 1:
        pieces = pieces[1:]        # the first piece began before the part read
    if pieces and pieces[-1] == b"":
        pieces = pieces[:-1]
    return LogRead([_line(piece) for piece in pieces], max(info.st_size, start + len(data)), len(data))


def _line(raw: bytes) -> str:
    cut = max(0, len(raw) - MAX_LINE_BYTES)   # as engine/observe/observer.py LogTail._finish
    text = raw[:MAX_LINE_BYTES].decode("utf-8", errors="replace").rstrip("\r")
    return f"{text} [... {cut} bytes cut]" if cut else text


class _NoEvidence(EvidenceGatherer):
    """In place of the observer's evidence gatherer (its cgroup OOM counter, /dev/kmsg, free space): the
    snapshot's own default evidence, every field unknown."""

    def __init__(self) -> None:
        super().__init__(Path("."))   # no folder is read: gather() below asks nothing of the machine

    def gather(self, trainer: TrainerStatus, checkpoints: CheckpointStatus | None = None) -> Evidence:
        return Evidence()   # StateSnapshot.evidence's default


@dataclass
class Triage:
    snapshot: StateSnapshot
    ending: Ending
    log: LogRead
    decision: Decision | None
    explanation: Explanation | None              # the winning playbook's match, clause by clause
    steps: list[PlannedStep] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)   # the evidence a log cannot give
    errors: list[str] = field(default_factory=list)    # expression errors (fail closed)

    @property
    def rung(self) -> str | None:
        """The divergence ladder's rung of the plan (engine/language/ladder.py): a log alone is a first attempt."""
        return ladder.rung((s.verb for s in self.steps if s.skipped is None and s.error is None), attempt=1)

    @property
    def verdict(self) -> str:
        """"recover", "escalate" (the decision, or its plan, hands the run to a human; or nothing claims a
        failed trainer) or "completed" (exit 0 and nothing matches)."""
        if self.decision is None:
            return "completed" if self.ending.code == 0 else "escalate"
        if self.decision.kind == "escalate":
            return "escalate"
        if any(step.verb == "escalate" and step.skipped is None and step.error is None for step in self.steps):
            return "escalate"
        return "recover"


def snapshot_from_log(lines: list[str], end: Ending, config: RunConfig, adapter: TrainerAdapter, now: float | None = None) -> StateSnapshot:
    """The snapshot the watcher would make of a dead trainer whose log holds these lines: the Observer's
    metrics and tail from its own parser, the exit as recorded; no process, no checkpoints, no disk."""
    now = time.time() if now is None else now
    observer = Observer(adapter, Path("."), progress_meaning_of(adapter, config))   # out_dir only feeds disk_status: replaced below
    observer.evidence = _NoEvidence()   # this machine's kernel, cgroups and disks are not the run's
    observer.launched_at = now
    read = observer.take_lines(lines, now)
    # The lines a live watcher would have read as new when it saw the exit: those after the last progress line.
    new = _after_last_progress(read, adapter)
    trainer = TrainerStatus(pid=PID_UNKNOWN, alive=False, exit_code=end.code, signal=end.signal, launches=1)
    # STARTING: the state `watch --dry-run` judges a run folder with no live trainer in (engine/watch/dry_run.py).
    snapshot = observer.snapshot(now, RunPhase.STARTING, trainer, CheckpointStatus(), new, config.watch)
    return snapshot.model_copy(update={"disk": DiskStatus()})   # unknown: total_bytes 0


def _is_progress(line: str, adapter: TrainerAdapter) -> bool:
    """A progress line as the Observer reads one: the adapter's own, or another stack's (engine/observe/other_stacks.py)."""
    return isinstance(adapter.parse_line(line), Progress) or other_stack_progress(line, None) is not None


def _after_last_progress(lines: list[str], adapter: TrainerAdapter) -> list[str]:
    last = max((i for i, line in enumerate(lines) if _is_progress(line, adapter)), default=-1)
    return lines[last + 1:][-200:]


def triage(log_path: Path, end: Ending, config: RunConfig, playbooks: list[Playbook], adapter: TrainerAdapter,
           tail_bytes: int = TAIL_BYTES) -> Triage:
    """Judge a log + exit as the watcher would (SourceError when the log cannot be read)."""
    log = read_log(log_path, tail_bytes)
    if not end.known:
        end = infer_ending(log.lines, adapter) or end
    snapshot = snapshot_from_log(log.lines, end, config, adapter)
    outcome = decide(snapshot, config, playbooks, MatchMemory(), AttemptHistory())
    decision = outcome.decision
    result = Triage(snapshot, end, log, decision, None, errors=list(outcome.errors))
    if decision is not None:
        result.explanation = decision.playbook.match.explain(MatchContext(state=snapshot, config=config))
        result.steps = plan(decision.playbook, snapshot, config, attempt=1)
    result.missing = missing_evidence(result, playbooks)
    if not end.known:
        result.missing += with_an_exit(result, config, playbooks)
    return result


def with_an_exit(result: Triage, config: RunConfig, playbooks: list[Playbook]) -> list[str]:
    """What the missing exit status kept from firing: the decision the same log gets with a non-zero exit."""
    dead = result.snapshot.model_copy(update={"trainer": result.snapshot.trainer.model_copy(update={"exit_code": 1})})
    other = decide(dead, config, playbooks, MatchMemory(), AttemptHistory()).decision
    if other is None or (result.decision is not None and other.playbook.name == result.decision.playbook.name):
        return []
    if other.playbook.acts_on:
        return [f"the exit status: with a non-zero exit (--exit 1) '{other.playbook.name}' would fire instead; it acts on "
                + "; ".join(other.playbook.acts_on)]
    return [f"the exit status: with a non-zero exit (--exit 1) '{other.playbook.name}' would fire instead "
            f"({other.playbook.description})"]


def missing_evidence(result: Triage, playbooks: list[Playbook]) -> list[str]:
    """What a log cannot show, each with the playbooks that could not be judged on it."""
    snapshot = result.snapshot
    notes = []
    if result.ending.inferred:
        notes.append(f"how the trainer ended was not given: read as {result.ending.given} from {result.ending.inferred} "
                     "(pass --exit N or --signal NAME to say otherwise)")
    elif not result.ending.known:
        notes.append("how the trainer ended is unknown: judged as an exit nobody saw (pass --exit N or --signal NAME)")
    if result.log.skipped:
        notes.append(f"only the last {result.log.read:,} bytes of {result.log.size:,} were read (the log's end)")
    if "evidence" in StateSnapshot.model_fields:
        notes.append("evidence beyond the log (the kernel's OOM killer, free space where it saved, the checkpoint it "
                     "resumed from) is unknown: not this machine's run")
    if snapshot.metrics.step is None:
        notes.append("no progress line recognised: step, loss and throughput are unknown")
    kinds: dict[str, list[str]] = {}
    for playbook in playbooks:
        for _, clause in walk(playbook.match):
            if clause.kind in NEEDS and playbook.name not in kinds.setdefault(clause.kind, []):
                kinds[clause.kind].append(playbook.name)
    for kind, text in NEEDS.items():
        if kinds.get(kind):
            notes.append(f"{text} ({', '.join(sorted(kinds[kind]))} not judged on it)")
    steps = {step.verb for step in result.steps if step.skipped is None}
    if steps & {"verify_checkpoints", "resume", "rollback", "prune_checkpoints"}:
        notes.append("the plan's checkpoint steps would act on the run's own checkpoint folder, which triage never reads")
    return notes
