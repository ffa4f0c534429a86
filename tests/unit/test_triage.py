"""`runbook triage LOG`: a pasted log judged by the watcher's own observer, matcher and planner."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.core.events import DryRunPlan, PlannedStepView
from runbook.cli import app
from runbook.exit_codes import ExitCode
from tests.conftest import require_capability

PROGRESS = "Epoch 1 | iter {i} step {s} | loss train: {loss}, val: n/a | iter time: 20.00 ms (step) remaining time: 0:00:09"
OOM_LOG = "\n".join([
    PROGRESS.format(i=4, s=1, loss=6.422),
    "Traceback (most recent call last):",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 172.00 MiB (GPU 0; 23.70 GiB total capacity)",
]) + "\n"
NAN_LOG = "\n".join([PROGRESS.format(i=4 * n, s=n, loss=loss) for n, loss in ((1, 6.4), (2, 6.1), (3, 5.9), (4, "nan"))]) + "\n"
IMPORT_LOG = """Traceback (most recent call last):
  File "/home/u/train.py", line 3, in <module>
    from deepspeed.ops.adam import FusedAdam
ImportError: /home/u/.cache/torch_extensions/fused_adam/fused_adam.so: cannot open shared object file: No such file or directory
"""
SIGTERM_LOG = PROGRESS.format(i=40, s=10, loss=4.2) + "\n"


def run(*args: str, cwd: Path | None = None):
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, ["triage", *args])
    finally:
        os.chdir(old)
    return result.exit_code, result.output


def write(tmp_path: Path, text: str | bytes, name: str = "trainer.log") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def as_json(*args: str) -> dict:
    code, output = run(*args, "--json")
    data = json.loads(output)
    assert data["exit_code"] == code
    return data


def run_without_file_permission_override(*args: str):
    """`runbook triage` in a process whose root has lost CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (dropped
    from the bounding set before exec): mode 000 then stops its read as it stops any user's."""
    import ctypes
    import subprocess

    from tests.conftest import RUNBOOK

    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:
        for cap in (1, 2):   # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH; 24 = PR_CAPBSET_DROP
            if libc.prctl(24, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    try:
        done = subprocess.run([RUNBOOK, "triage", *args], capture_output=True, text=True, timeout=120, preexec_fn=drop)
    except subprocess.SubprocessError as err:
        require_capability(f"cannot drop root's file-permission override here: {err}")
    return done.returncode, done.stdout + done.stderr


def test_oom_recovers_by_halving_the_micro_batch(tmp_path):
    log = write(tmp_path, OOM_LOG)
    code, output = run(str(log), "--exit", "1")
    assert code == ExitCode.OK, output
    assert "'oom' fires" in output
    # explain's clauses: the matched log clause names the line that matched it, the SIGKILL branch did not match
    assert "[matched]  log: expected a tail line matching /OutOfMemoryError|" in output, output
    assert "actual 'torch.OutOfMemoryError: CUDA out of memory." in output, output
    assert "[no match] exit: expected trainer exited with signal in ['SIGKILL']; actual (1, None)" in output, output
    assert "micro_batch_size=2" in output                                  # the planner's value (default config: 4)
    assert "disk free space unknown: not this machine's run" in output
    assert "no checkpoint folder to verify" in output
    assert "also matched: unknown-crash (inhibited)" in output


def test_nan_loss_is_recognised_from_the_progress_lines(tmp_path):
    data = as_json(str(write(tmp_path, NAN_LOG)), "--exit", "1")
    assert data["exit_code"] == ExitCode.OK
    assert data["playbook"] == "nan" and data["verdict"] == "recover"
    assert data["metrics"]["step"] == 4
    assert data["rung"] == "rung 1 of the divergence ladder: roll back and lower the lr"   # a log alone: the first attempt


def test_an_import_error_needs_a_human(tmp_path):
    code, output = run(str(write(tmp_path, IMPORT_LOG)), "--exit", "1")
    assert code == ExitCode.TRIAGE_ESCALATE == 16, output
    assert "'unknown-crash' fires" in output
    assert "runbook would escalate to a human (exit 16)" in output


def test_sigterm_is_a_preemption_by_signal_or_by_the_shells_code(tmp_path):
    log = write(tmp_path, SIGTERM_LOG)
    by_signal = as_json(str(log), "--signal", "SIGTERM")
    assert by_signal["playbook"] == "preemption" and by_signal["exit_code"] == 0
    assert by_signal["exit"] == {"code": -15, "signal": "SIGTERM", "known": True, "given": "signal SIGTERM"}
    assert as_json(str(log), "--signal", "term")["playbook"] == "preemption"
    assert as_json(str(log), "--exit", "143")["playbook"] == "preemption"   # 128+15, as a shell shows it
    assert {"verify_checkpoints", "resume"} <= {s["verb"] for s in by_signal["plan"]}


def test_the_json_shape(tmp_path):
    data = as_json(str(write(tmp_path, OOM_LOG)), "--exit", "1")
    assert set(data) == {"log", "log_bytes", "bytes_read", "lines", "exit", "config", "verdict", "playbook", "decision",
                         "explain", "missing", "plan", "rung", "metrics", "expression_errors", "exit_code"}
    assert data["decision"]["kind"] == "recover" and "oom" in data["decision"]["matched"]
    assert data["decision"]["inhibited"] == ["unknown-crash"]
    assert data["explain"]["matched"] is data["explain"]["held"] is True and data["explain"]["children"]          # oom's match, clause by clause
    assert {"clause", "matched", "held", "expected", "actual", "children"} == set(data["explain"]["children"][0])
    assert all(set(step) >= {"index", "verb", "description", "params", "skipped"} for step in data["plan"])
    assert next(s for s in data["plan"] if s["verb"] == "set_hyperparameters")["params"]["micro_batch_size"] == 2
    assert any("disk free space unknown" in note for note in data["missing"])
    assert data["lines"] == 3 and data["bytes_read"] == data["log_bytes"] == len(OOM_LOG)


def test_no_exit_given_is_read_from_the_traceback_at_the_logs_end(tmp_path):
    # issue 34: a plain CUDA OOM traceback without --exit was 'unknown-exit' (restart at the same micro-batch)
    data = as_json(str(write(tmp_path, OOM_LOG)))
    assert data["exit"]["given"] == "exit 1 (inferred)" and data["exit"]["code"] == 1
    assert data["playbook"] == "oom"
    assert any("inferred" in note and "pass --exit N or --signal NAME" in note for note in data["missing"])


def test_no_exit_given_and_none_readable_is_an_exit_nobody_saw(tmp_path):
    data = as_json(str(write(tmp_path, "step 10 loss 2.31\nstep 11 loss 2.30\n")))
    assert data["exit"]["known"] is False and data["playbook"] != "oom"
    assert any("pass --exit N or --signal NAME" in note for note in data["missing"])


@pytest.mark.parametrize("make", ["missing", "folder", "fifo", "unreadable", "regular but refuses reads"])
def test_an_unreadable_log_is_not_found(tmp_path, make):
    path = tmp_path / "trainer.log"
    if make == "folder":
        path.mkdir()
    elif make == "fifo":
        os.mkfifo(path)   # opening it would block: refused before any open
    elif make == "unreadable":
        path.write_text(OOM_LOG)
        path.chmod(0)
    elif make == "regular but refuses reads":
        path = Path("/proc/self/mem")   # a regular file that opens, then fails the read (EIO at offset 0), root or not
    if make == "unreadable" and os.access(path, os.R_OK):
        # root (CI) reads a mode-000 file: that case runs without root's override, so the Permission-denied
        # branch is tested where CI runs too (it used to return early there, testing nothing).
        code, output = run_without_file_permission_override(str(path), "--exit", "1")
    else:
        code, output = run(str(path), "--exit", "1")
    assert code == ExitCode.NOT_FOUND, output
    assert output.startswith("error: ") and "Traceback" not in output
    if make == "unreadable":
        assert "cannot read: Permission denied" in output, output
    if make == "regular but refuses reads":
        assert "cannot read: Input/output error" in output, output   # triage.read_log's OSError branch


def test_a_huge_binary_log_reads_only_its_end(tmp_path):
    junk = bytes(range(256)) * 4096 * 8 + b"\xff\xfe\x00\x1b[31m" * 1000   # 8 MiB + of binary, no newlines for long
    log = write(tmp_path, junk + b"\n" + OOM_LOG.encode())
    code, output = run(str(log), "--exit", "1")
    assert code == ExitCode.OK, output
    assert "'oom' fires" in output
    assert "only the last 4,194,304 bytes of" in output
    assert "\x1b" not in output and "\x00" not in output                  # control bytes are shown escaped


def test_bad_usage(tmp_path):
    log = write(tmp_path, OOM_LOG)
    assert run(str(log), "--exit", "1", "--signal", "SIGTERM")[0] == ExitCode.USAGE
    assert run(str(log), "--signal", "SIGNOPE")[0] == ExitCode.USAGE


def tree_digest(root: Path) -> dict:
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


def test_triage_writes_nothing(tmp_path):
    """Not in the log's folder, nor the cwd, nor a run config's project (its run folder and checkpoints)."""
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    (project / "playbooks").mkdir()
    config = project / "configs" / "run_config.yaml"
    config.write_text("micro_batch_size: 8\nbatch_size: 16\ndata:\n  make_default: false\n")
    log = write(tmp_path, OOM_LOG)
    before = tree_digest(tmp_path)
    code, output = run(str(log), str(config), "--exit", "1", cwd=project)
    assert code == ExitCode.OK, output
    assert "micro_batch_size=4" in output                                  # the user's config, halved
    assert tree_digest(tmp_path) == before                                 # no run folder, no .runbook, nothing


def test_a_project_playbook_is_used_with_its_config(tmp_path):
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    (project / "playbooks").mkdir()
    (project / "playbooks" / "missing_extension.yaml").write_text("""\
name: missing-extension
description: A compiled extension is missing; rebuild it.
priority: 60
inhibits: [unknown-crash]
match:
  all:
    - exit: {nonzero: true}
    - log: {pattern: "ImportError: .*\\\\.so: cannot open shared object file", scope: tail}
actions:
  - escalate: {reason: "rebuild the extension: the run cannot start without it"}
""")
    config = project / "configs" / "run_config.yaml"
    config.write_text("data:\n  make_default: false\n")
    data = as_json(str(write(tmp_path, IMPORT_LOG)), str(config), "--exit", "1")
    assert data["playbook"] == "missing-extension", data
    assert data["verdict"] == "escalate" and data["exit_code"] == ExitCode.TRIAGE_ESCALATE
    assert "1 of the project's own" in data["config"]


def test_same_playbook_and_plan_as_watch_dry_run(tmp_path):
    """A log + exit in a run folder judged by `runbook watch --dry-run`'s own code (observe_without_acting on
    a Supervisor), and the same log + exit judged by triage: the same playbook and the same planned steps."""
    from engine.core.config import RunConfig  # noqa: F401 - the config model both read
    from engine.language.playbook_set import load_run_playbooks
    from engine.trainers import adapter_for
    from engine.trainers.run_config import load_config
    from engine.watch.supervisor import Supervisor
    from engine.watch.triage import ending, triage

    cases = [(OOM_LOG, 1, None), (NAN_LOG, 1, None), (IMPORT_LOG, 1, None), (SIGTERM_LOG, -15, "SIGTERM")]
    for n, (text, code, sig) in enumerate(cases):
        project = tmp_path / f"project-{n}"
        (project / "configs").mkdir(parents=True)
        config = project / "configs" / "run_config.yaml"
        config.write_text("micro_batch_size: 8\nbatch_size: 16\ndata:\n  make_default: false\n")
        loaded = load_config(config)
        log = loaded.run_dir / "logs" / "trainer-001.log"
        log.parent.mkdir(parents=True)
        log.write_text(text)
        entries = [
            {"time": 1.0, "kind": "launch", "launch": 1, "pid": 999999, "log": str(log), "resume_from": None, "argv": []},
            {"time": 1.1, "kind": "transition", "from": "starting", "to": "running", "reason": "launch 1"},
            {"time": 5.0, "kind": "trainer_exited", "pid": 999999, "exit_code": code, "signal": sig},
        ]
        loaded.folder.journal.write_text("".join(json.dumps(e) + "\n" for e in entries))
        playbooks = load_run_playbooks(loaded, adapter_for(loaded.config.trainer.kind))
        events = []

        class NoNotices:
            def close(self):
                pass

        supervisor = Supervisor(loaded, playbooks, NoNotices(), "sha256:" + "0" * 64, dry_run=True,
                                events=events.append)
        supervisor.run()
        planned = [event for event in events if isinstance(event, DryRunPlan)]
        assert len(planned) == 1, events
        watched = (planned[0].playbook, list(planned[0].steps))

        end = ending(signal_arg=sig) if sig else ending(exit_code=code)
        judged = triage(log, end, loaded.config, playbooks, adapter_for(loaded.config.trainer.kind))
        assert (judged.decision.playbook.name, [PlannedStepView.of(s) for s in judged.steps]) == watched, text
