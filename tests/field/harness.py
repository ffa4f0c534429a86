"""Judge the field corpus (tests/field/corpus/*.yaml) the way runbook would, case by case.

Shared by tests/field/test_field_corpus.py and benchmarks/field_accuracy.py.

A case whose trainer ended (`exit` given) goes through the real watcher path, the one
`runbook watch --dry-run CONFIG --json` runs: a run folder is written for it (a journal with a launch
line and the trainer's exit, the launcher's exit-status file, and the trainer log holding the case's
lines), then runbook.watch_command.run_watch(config, dry_run=True, as_json=True) is called in-process
and its JSON events are read back: the `dry_run_plan` event names the playbook, the decision
(recover / escalate) and the verbs that would run. Nothing in the engine is bypassed or mocked.

A case whose trainer was still running (`exit: null`: a hang, a watchdog line before the abort, a run
that keeps going on NaN) cannot be dry-run: a dry run attaches to a live process, and there is none.
Those are judged through the playbooks' own snapshot path, the one `runbook playbooks test` uses
(engine/language/playbook_testing.build_snapshots + matcher.decide + planner.plan), with the run's
full playbook set and config and the metrics the watcher's Observer reads from the case's lines
(engine/observe/log_replay.py), over two observations of a live trainer: the case's lines arrive, then
the trainer stays silent past its hang timeout (what a watcher sees next of a run that stopped
printing). The first recover/escalate decision is the verdict.

Exit shapes, as a run folder records them: `{code: N}` is what the trainer process returned (137 from a
shell wrapper stays 137, -9 is Popen's SIGKILL); `{signal: SIGX}` is Popen's -N.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import signal as _signal
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml import YAML

CORPUS_DIR = Path(__file__).parent / "corpus"
HELD_OUT_FILE = CORPUS_DIR / "held_out.txt"   # round-4 ids no rule may be written from (README)
REPO = Path(__file__).resolve().parents[2]
FAKE_PID = 999_999   # no such trainer: the dry run finds it gone and reads how it ended

# The class a playbook stands for. Anything that only escalates is "escalate" (a human decides).
CLASS_OF_PLAYBOOK = {
    "oom": "oom", "nan": "nan", "loss-spike": "nan", "disk-full": "disk-full", "disk-low": "disk-full",
    "corrupt-checkpoint": "corrupt-checkpoint", "collective-timeout": "collective-timeout",
    "rank-died": "rank-died", "rank-exited": "rank-died", "killed": "killed", "node-died": "killed",
    "preemption": "preemption", "node-preempted": "preemption", "time-limit": "time-limit",
    "bad-data": "bad-data", "hang": "hang", "rank-hang": "hang", "hardware-failure": "hardware-failure",
    "unknown-crash": "needs-human", "unknown-exit": "unknown-exit", "slow-training": "slow",
    "rank-straggler": "slow", "launcher-stopped": "stopped", "environment-fault": "needs-human",
    "missing-final": "needs-human", "same-error-at-start": "needs-human",
    "same-failure-again": "needs-human",
}
ESCALATE_CLASSES = {"needs-human", "hardware-failure"}   # the "escalate" family
# Verbs that change the run, its checkpoints or its next launch: none may run before an escalate for a
# case that must reach a human. (verify_checkpoints only quarantines what fails verification, record and
# notify only write, scan_data only reads.)
RECOVERY_VERBS = {"resume", "rollback", "set_hyperparameters", "set_env", "prune_checkpoints", "compress_logs", "stop"}


@dataclass
class Case:
    id: str
    stack: str
    expect: str
    exit: dict | None
    launcher: str
    no_auto_recovery: bool
    log: str
    round: int | None = None        # the collection round that added it (None: rounds 1-3)


@dataclass
class Verdict:
    case: Case
    path: str                       # "dry-run" or "snapshot"
    playbook: str | None = None
    decision: str | None = None     # recover / escalate / None (nothing fired)
    actions: list[str] = field(default_factory=list)

    @property
    def escalated(self) -> bool:
        """A human gets the run and no recovery ran first."""
        if self.decision == "escalate":
            return True
        if "escalate" not in self.actions:
            return False
        before = self.actions[: self.actions.index("escalate")]
        return not RECOVERY_VERBS & set(before)

    @property
    def recovered(self) -> bool:
        """Runbook acted on the run by itself (a recovery verb ran, before any escalate)."""
        return self.decision == "recover" and not self.escalated and bool(RECOVERY_VERBS & set(self.actions))

    @property
    def predicted(self) -> str:
        if self.playbook is None:
            return "none"
        if self.decision == "escalate":
            return "escalate"
        return CLASS_OF_PLAYBOOK.get(self.playbook, self.playbook)

    @property
    def correct(self) -> bool:
        if self.predicted == self.case.expect:
            return True
        return self.case.no_auto_recovery and self.escalated

    @property
    def auto_recovered_forbidden(self) -> bool:
        return self.case.no_auto_recovery and not self.escalated


def load_cases(corpus_dir: Path = CORPUS_DIR) -> list[Case]:
    yaml = YAML(typ="safe")
    cases = []
    for path in sorted(corpus_dir.glob("*.yaml")):
        doc = yaml.load(path.read_text(encoding="utf-8"))
        for c in doc["cases"]:
            cases.append(Case(c["id"], doc["stack"], c["expect"], c["exit"], c["launcher"],
                              bool(c.get("no_auto_recovery", False)), c["log"], c.get("round")))
    return cases


def load_held_out(path: Path = HELD_OUT_FILE) -> set[str]:
    """The held-out ids: one per line, `#` starts a comment."""
    if not path.exists():
        return set()
    return {line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()} - {""}


GROUPS = ("old", "written-from", "held-out")


def group_of(case: Case, held_out: set[str]) -> str:
    """old: rounds 1-3; held-out: a round-4 case no rule was written from; written-from: the other round-4 cases."""
    if case.round is None:
        return "old"
    return "held-out" if case.id in held_out else "written-from"


def popen_exit(exit_: dict) -> int:
    """The exit as runbook's launcher records it (Popen: -N for signal N)."""
    if "signal" in exit_:
        return -int(_signal.Signals[exit_["signal"]])
    return int(exit_["code"])


# --- a project to judge in ---------------------------------------------------------------------------
def make_field_project(root: Path, data: Path | None = None) -> Path:
    """A scratch project (the repo's default config, the shipped playbooks) on the default corpus and
    tokenizer; no training. Returns the config path. `data`: a folder made by runbook's
    ensure_default_assets (stdlib/, tokenizer/) to link instead of making one."""
    from runbook.default_data import ensure_default_assets
    from tests.conftest import make_project

    if data is None:
        data = root / "shared-data"
        ensure_default_assets(data / "stdlib", data / "tokenizer")
    project = make_project(root / "project", data, prebuilt_data=False,
                           data_hash="sha256:" + "0" * 64, micro_batch_size=4, batch_size=16)
    return project.config


_LOADED: dict[Path, object] = {}


def _loaded(config: Path):
    from engine.trainers.run_config import load_config

    if config not in _LOADED:
        _LOADED[config] = load_config(config)
    return _LOADED[config]


def _write_run_folder(config: Path, case: Case) -> None:
    """The run folder an ended trainer leaves: journal (launch, running, exit), the launcher's
    exit-status file and the trainer log with the case's lines."""
    loaded = _loaded(config)
    shutil.rmtree(loaded.run_dir, ignore_errors=True)
    folder = loaded.folder
    log = loaded.run_dir / "logs" / "trainer-001.log"
    log.parent.mkdir(parents=True)
    log.write_text(case.log if case.log.endswith("\n") else case.log + "\n", encoding="utf-8")
    code = popen_exit(case.exit)
    status = folder.exit_status(1)
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text(json.dumps({"launcher_pid": FAKE_PID + 1, "trainer_pid": FAKE_PID, "started": 1.0,
                                  "exit_code": code, "signal": None, "ended": 5.0}), encoding="utf-8")
    entries = [
        {"time": 1.0, "kind": "launch", "launch": 1, "pid": FAKE_PID, "log": str(log), "resume_from": None, "argv": []},
        {"time": 1.1, "kind": "transition", "from": "starting", "to": "running", "reason": "launch 1"},
        {"time": 5.0, "kind": "trainer_exited", "pid": FAKE_PID, "exit_code": code, "signal": None},
    ]
    folder.journal.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")


def judge_ended(config: Path, case: Case) -> Verdict:
    """`runbook watch --dry-run CONFIG --json`, in-process, on the case's run folder."""
    from runbook.watch_command import run_watch

    _write_run_folder(config, case)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_watch(config, dry_run=True, as_json=True)
    if int(code) != 0:
        raise RuntimeError(f"{case.id}: runbook watch --dry-run exited {int(code)}: {err.getvalue()[-2000:]}")
    verdict = Verdict(case, "dry-run")
    for line in out.getvalue().splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event.get("event") == "dry_run_plan":
            verdict.playbook, verdict.decision, verdict.actions = event["playbook"], event["decision"], event["actions"]
    return verdict


def judge_running(config: Path, case: Case, playbooks=None) -> Verdict:
    """A live trainer (no dry run possible): the playbooks' snapshot path, two observations."""
    from engine.language.matcher import AttemptHistory, MatchMemory, decide
    from engine.language.planner import plan
    from engine.language.playbook_set import load_run_playbooks
    from engine.trainers import adapter_for
    from engine.language.playbook_testing import build_snapshots

    from engine.observe.log_replay import replay

    loaded = _loaded(config)
    cfg = loaded.config
    adapter = adapter_for(loaded.config.trainer.kind)
    playbooks = playbooks if playbooks is not None else load_run_playbooks(loaded, adapter)
    timeout = cfg.watch.hang_timeout_s
    live = {"alive": True, "pid": FAKE_PID, "launches": 1}
    # The metrics the watcher's Observer reads from the lines (a loss, a step: another stack's progress line too).
    metrics = replay(case.log.splitlines(), adapter, adapter.progress_meaning(cfg)).metrics().model_dump()
    observations = [
        {"trainer": live, "new_lines": case.log.splitlines(), "seconds_since_progress": 1.0, "hang_timeout_s": timeout,
         "metrics": metrics},
        {"trainer": live, "new_lines": [], "seconds_since_progress": timeout + 1, "hang_timeout_s": timeout,
         "metrics": metrics},
    ]
    memory, history = MatchMemory(), AttemptHistory()
    verdict = Verdict(case, "snapshot")
    for snapshot in build_snapshots(observations, cfg):
        outcome = decide(snapshot, cfg, playbooks, memory, history)
        memory = outcome.memory
        decision = outcome.decision
        if decision is not None and decision.kind in ("recover", "escalate"):
            steps = plan(decision.playbook, snapshot, cfg, 1)
            verdict.playbook, verdict.decision = decision.playbook.name, decision.kind
            verdict.actions = [s.verb for s in steps if s.skipped is None and not s.error]
            break
    return verdict


def judge_all(config: Path, cases: list[Case] | None = None) -> list[Verdict]:
    cases = cases if cases is not None else load_cases()
    return [judge_ended(config, c) if c.exit is not None else judge_running(config, c) for c in cases]


# --- the table -----------------------------------------------------------------------------------
def per_class(verdicts: list[Verdict]) -> dict[str, tuple[int, int]]:
    totals, right = Counter(), Counter()
    for v in verdicts:
        totals[v.case.expect] += 1
        right[v.case.expect] += v.correct
    return {k: (right[k], totals[k]) for k in sorted(totals, key=lambda k: (-totals[k], k))}


def table(verdicts: list[Verdict]) -> str:
    rows = ["| class | cases | correct | accuracy | judged as (when wrong) |", "| --- | ---: | ---: | ---: | --- |"]
    wrong = defaultdict(Counter)
    for v in verdicts:
        if not v.correct:
            wrong[v.case.expect][v.predicted] += 1
    for cls, (ok, total) in per_class(verdicts).items():
        misses = ", ".join(f"{k} x{n}" for k, n in wrong[cls].most_common())
        rows.append(f"| {cls} | {total} | {ok} | {100 * ok / total:.0f}% | {misses} |")
    ok = sum(v.correct for v in verdicts)
    rows.append(f"| **all** | **{len(verdicts)}** | **{ok}** | **{100 * ok / len(verdicts):.1f}%** | |")
    nar = [v for v in verdicts if v.case.no_auto_recovery]
    bad = sum(v.auto_recovered_forbidden for v in nar)
    rows.append("")
    rows.append(f"no_auto_recovery cases: {len(nar)}, escalated to a human: {len(nar) - bad}, recovered automatically: {bad}")
    return "\n".join(rows)


__all__ = ["GROUPS", "Case", "Verdict", "group_of", "judge_all", "judge_ended", "judge_running", "load_cases",
           "load_held_out", "make_field_project", "per_class", "table"]
