"""`runbook status`, `runbook report` and the live view, on a run folder laid out as a real run leaves it.

No training here: the trainer logs use litgpt's real progress-line format (engine/trainers/litgpt/log_lines.py
PROGRESS), the journal and incident records carry the fields the supervisor writes, and the
checkpoints are real torch.save files sealed by engine.checkpoints.store. The story of the run:

    launch 1  from scratch, steps 1..45, SIGTERM at 45       -> incident-1 preemption, resumed from 40 (5 lost)
    launch 2  from step 40, steps 41..70, loss spike          -> incident-2 loss-spike, rolled back to 60,
                                                                 lr 0.003 -> 0.00075 (10 lost)
    launch 3  from step 60, steps 61..100, final evaluation   -> completed

Steps computed 45 + 30 + 40 = 115, useful 100: goodput 100 / 115 = 87.0%.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from engine.core.events import ActionDone, ActionResult, IncidentClosed, IncidentOpened, Observed, Transition
from engine.records.incident import Incident
from engine.checkpoints import store as ckpts
from engine.checkpoints.last_link import update_last_link
from engine.checkpoints.manifest import seal_checkpoint
from engine.core.state import CheckpointStatus, DiskStatus, Metrics, RunPhase, StateSnapshot, TrainerStatus
from engine.core.durable import gzip_replace as gzip_file
from engine.trainers.litgpt.layout import LitGPTLayout
from runbook.cli import app
from engine.trainers.run_config import load_config
from runbook.live_view import LiveView
from runbook.report import read_history

CONFIG_TEXT = """\
micro_batch_size: 4
batch_size: 16
lr: 0.003
save_interval: 20
max_tokens: 102400        # 100 optimizer steps of 16 x 64 tokens
"""
T0 = 1_790_000_000.0
runner = CliRunner()


def progress_line(step: int, loss: float, val: str = "n/a") -> str:
    return (f"Epoch 1 | iter {4 * step} step {step} | loss train: {loss:.3f}, val: {val} | "
            f"iter time: 200.00 ms (step) remaining time: 0:00:{100 - step:02d}")


def write_log(path: Path, steps: range, out_dir: Path, resume_from: int | None, spike_from: int | None = None,
              final: bool = False) -> None:
    lines = ["Verifying settings ...", "Measured TFLOPs: 0.00"]
    if resume_from is not None:
        lines.append(f"Resuming training from {out_dir}/step-{resume_from:08d}/lit_model.pth")
    for step in steps:
        loss = 6.5 - 0.02 * step if spike_from is None or step < spike_from else 14.0
        lines.append(progress_line(step, loss))
        if step % 20 == 0:
            lines += ["Validating ...", f"iter {4 * step}: val loss {6.6 - 0.02 * step:.4f}, val time: 10.00 ms",
                      f"Saving checkpoint to '{out_dir}/step-{step:08d}/lit_model.pth'"]
    if final:
        lines.append("Final evaluation | val loss: 4.533 | val ppl: 93.045")
    path.write_text("\n".join(lines) + "\n")


def make_checkpoint(out_dir: Path, step: int) -> None:
    folder = out_dir / f"step-{step:08d}"
    folder.mkdir(parents=True)
    torch.save({"model": {"w": torch.full((4, 4), float(step))}, "iter_num": 4 * step, "step_count": step},
               folder / "lit_model.pth")
    for name in ("model_config.yaml", "hyperparameters.yaml"):
        (folder / name).write_text(f"{name}: {step}\n")
    assert seal_checkpoint(ckpts.Checkpoint(folder, step, LitGPTLayout())).ok


def incident(number: int, playbook: str, step: int, resumed: int, opened: float, changes: dict | None = None) -> dict:
    return {
        "id": f"incident-{number}", "playbook": playbook, "severity": "warning", "symptom": f"{playbook} symptom",
        "decision": "recover", "attempt": 1, "decision_reason": f"'{playbook}' matched", "matched": [playbook],
        "detected_at": opened, "opened_at": opened, "opened_at_iso": "2026-09-21T12:00:00+00:00",
        "step_at_failure": step, "tokens_at_failure": step * 1024, "trainer_exit_code": -15,
        "plan": [{"index": 0, "verb": "resume", "description": "restart the trainer from the newest verified checkpoint"}],
        "actions": [{"index": 0, "verb": "resume", "ok": True, "summary": f"relaunched trainer from step {resumed}",
                     "seconds": 0.2}],
        "outcome": "recovered", "config_changes": changes or {}, "resumed_from": f"step-{resumed:08d}/lit_model.pth",
        "resumed_step": resumed, "notes": [], "closed_at": opened + 1, "runbook_seconds": 1.0,
        "recovery_seconds": 7.5, "steps_lost": step - resumed, "tokens_lost": (step - resumed) * 16 * 64,
    }


@pytest.fixture()
def finished_run(tmp_path) -> Path:
    """A project whose run went through a preemption and a loss-spike rollback, then completed."""
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "run_config.yaml"
    config.write_text(CONFIG_TEXT)
    out_dir, run_dir = tmp_path / "checkpoints" / "pretrain", tmp_path / "runs" / "pretrain"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "incidents").mkdir()
    write_log(run_dir / "logs" / "trainer-001.log", range(1, 46), out_dir, None)
    write_log(run_dir / "logs" / "trainer-002.log", range(41, 71), out_dir, 40, spike_from=65)
    write_log(run_dir / "logs" / "trainer-003.log", range(61, 101), out_dir, 60, final=True)

    entries = []

    def add(kind: str, at: float, **data) -> None:
        entries.append({"time": T0 + at, "kind": kind, **data})

    for n, (at, resume) in enumerate([(0, None), (60, 40), (130, 60)], start=1):
        add("launch", at, launch=n, pid=40000 + n, log=str(run_dir / "logs" / f"trainer-{n:03d}.log"),
            resume_from=str(out_dir / f"step-{resume:08d}" / "lit_model.pth") if resume else None, argv=["litgpt"])
        add("transition", at, **{"from": "starting" if n == 1 else "recovering", "to": "running", "reason": f"launch {n}"})
    add("incident_opened", 59, incident="incident-1", playbook="preemption", decision="recover", snapshot={})
    add("incident_closed", 61, incident="incident-1", outcome="recovered")
    add("incident_opened", 129, incident="incident-2", playbook="loss-spike", decision="recover", snapshot={})
    add("incident_closed", 131, incident="incident-2", outcome="recovered")
    add("transition", 200, **{"from": "running", "to": "completed", "reason": "trainer exited 0 and final/ exists"})
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))

    records = [incident(1, "preemption", 45, 40, T0 + 59),
               incident(2, "loss-spike", 70, 60, T0 + 129, changes={"lr": [0.003, 0.00075]})]
    for record in records:
        (run_dir / "incidents" / f"{record['id']}.json").write_text(json.dumps(record, indent=2))

    for step in (60, 80, 100):
        make_checkpoint(out_dir, step)
    update_last_link(out_dir, ckpts.Checkpoint(out_dir / "step-00000100", 100, LitGPTLayout()))
    (out_dir / "final").mkdir()
    (out_dir / "final" / "lit_model.pth").write_bytes((out_dir / "step-00000100" / "lit_model.pth").read_bytes())
    return config


# --- status --------------------------------------------------------------------------------------
def test_status_tells_state_step_checkpoints_and_the_last_incident(finished_run):
    result = runner.invoke(app, ["status", str(finished_run)])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "state     completed" in text
    assert "step      100 of 100 (100%)" in text and "ETA done" in text
    assert "final val 4.5330" in text
    assert "60, 80, 100; last -> step 100; final/ written" in text
    assert "incidents 2 (2 recovered)" in text
    assert "last: incident-2 loss-spike recovered at step 70, steps lost 10" in text


def test_status_json_is_machine_readable(finished_run):
    result = runner.invoke(app, ["status", str(finished_run), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["state"] == "completed"
    assert data["progress"]["step"] == 100 and data["progress"]["total_steps"] == 100
    assert data["progress"]["loss"] == pytest.approx(4.5) and data["progress"]["final_val_loss"] == pytest.approx(4.533)
    assert {k: data["trainer"][k] for k in ("pid", "alive", "launches", "supervised")} == {
        "pid": 40003, "alive": False, "launches": 3, "supervised": False}
    assert data["checkpoints"]["last_link_step"] == 100 and data["checkpoints"]["sealed_steps"] == [60, 80, 100]
    assert data["incidents"]["count"] == 2 and data["incidents"]["last"]["id"] == "incident-2"
    assert data["watcher"] == {"running": False, "pid": None}


def _journal_launch(run_dir, pid, **extra):
    entries = (run_dir / "journal.jsonl").read_text().splitlines()[:-1]   # drop "completed": still running
    entries.append(json.dumps({"time": time.time(), "kind": "launch", "launch": 4, "pid": pid,
                               "log": str(run_dir / "logs" / "trainer-003.log"), "resume_from": None, **extra}))
    (run_dir / "journal.jsonl").write_text("\n".join(entries) + "\n")


def test_status_of_a_live_run_without_its_watcher_says_unsupervised(finished_run):
    """A real launcher (engine/process/launcher.py) records the trainer: pid, start time and launcher record agree."""
    import psutil

    from engine.core.run_folder import RunFolder
    from engine.process.trainer_process import LAUNCHER

    run_dir = finished_run.parent.parent / "runs" / "pretrain"
    status_path = RunFolder(run_dir).exit_status(4)
    status_path.parent.mkdir(parents=True, exist_ok=True)
    launcher = subprocess.Popen([sys.executable, str(LAUNCHER), str(status_path), "--", "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while "trainer_pid" not in (json.loads(status_path.read_text()) if status_path.exists() else {}):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        pid = json.loads(status_path.read_text())["trainer_pid"]
        _journal_launch(run_dir, pid, started=psutil.Process(pid).create_time())
        result = runner.invoke(app, ["status", str(finished_run)])
        assert result.exit_code == 12, result.output   # ExitCode.WATCHER_FAILED: unfinished, nobody watching
        assert f"trainer   alive, UNSUPERVISED (no watcher: `runbook watch` re-attaches to it), pid {pid}" in result.output
        assert "no watcher holds the run folder" in result.output
    finally:
        launcher.kill()
        subprocess.run(["pkill", "-f", str(status_path)])
        launcher.wait()


@pytest.mark.parametrize("forgery", ["no start time", "wrong start time", "no launcher record"])
def test_status_never_calls_an_unproven_pid_this_runs_trainer(finished_run, forgery):
    """A journal line naming an unrelated live process (hand edit, old format, reused pid): not "alive"."""
    run_dir = finished_run.parent.parent / "runs" / "pretrain"
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        import psutil

        started = psutil.Process(sleeper.pid).create_time()
        extra = {"no start time": {}, "wrong start time": {"started": started - 3600},
                 "no launcher record": {"started": started}}[forgery]
        _journal_launch(run_dir, sleeper.pid, **extra)
        result = runner.invoke(app, ["status", str(finished_run), "--json"])
        trainer = json.loads(result.output)["trainer"]
        assert trainer["alive"] is False and trainer["proven"] is False, trainer
        result = runner.invoke(app, ["status", str(finished_run)])
        assert "trainer   alive" not in result.output
        assert "not running" in result.output
    finally:
        sleeper.kill()
        sleeper.wait()


def test_status_without_a_run_folder_is_one_sentence_and_exit_3(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "run_config.yaml").write_text(CONFIG_TEXT)
    result = runner.invoke(app, ["status", str(tmp_path / "configs" / "run_config.yaml")])
    assert result.exit_code == 3
    assert "no run has started in" in result.output and "runbook watch" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


# --- report --------------------------------------------------------------------------------------
def test_goodput_counts_every_launch_from_its_resume_point(finished_run):
    gzip_file(finished_run.parent.parent / "runs" / "pretrain" / "logs" / "trainer-001.log")  # as upkeep does
    history = read_history(load_config(finished_run))
    assert history.launches[0].log.name == "trainer-001.log.gz"
    assert [(launch.start_step, launch.last_step, launch.steps_run) for launch in history.launches] == \
        [(0, 45, 45), (40, 70, 30), (60, 100, 40)]
    assert history.computed_steps == 115 and history.useful_steps == 100
    assert history.goodput == pytest.approx(100 / 115)
    assert history.launches[1].val_steps == [60] and history.launches[2].final_val_loss == pytest.approx(4.533)


def test_report_writes_markdown_with_the_incident_table_and_a_png(finished_run):
    result = runner.invoke(app, ["report", str(finished_run)])
    assert result.exit_code == 0, result.output
    report_dir = finished_run.parent.parent / "runs" / "pretrain" / "report"
    markdown = (report_dir / "report.md").read_text()
    png = report_dir / "report-loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert "![train and val loss" in markdown and "(report-loss.png)" in markdown
    assert "| incident-1 | preemption | recovered | 45 | 40 | 5 | 5,120 | 7.5 | - |" in markdown
    assert "| incident-2 | loss-spike | recovered | 70 | 60 | 10 | 10,240 | 7.5 | lr 0.003 → 0.00075 |" in markdown
    assert "| goodput | 87.0% (100 useful steps / 115 steps computed) |" in markdown
    assert "Here: 100 / 115 = 87.0%." in markdown


def test_report_of_a_run_without_incidents_to_a_chosen_path(finished_run, tmp_path):
    run_dir = finished_run.parent.parent / "runs" / "pretrain"
    for path in [*(run_dir / "incidents").iterdir(), run_dir / "logs" / "trainer-002.log", run_dir / "logs" / "trainer-003.log"]:
        path.unlink()
    entries = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries[:2]))
    target = tmp_path / "elsewhere" / "run.md"
    result = runner.invoke(app, ["report", str(finished_run), "--output", str(target)])
    assert result.exit_code == 0, result.output
    markdown = target.read_text()
    assert "No incidents" in markdown
    assert "| goodput | 100.0% (45 useful steps / 45 steps computed) |" in markdown
    assert (tmp_path / "elsewhere" / "run-loss.png").stat().st_size > 10_000


# --- live view -----------------------------------------------------------------------------------
def snapshot(step: int, at: float, loss: float) -> StateSnapshot:
    return StateSnapshot(
        time=at, run_state=RunPhase.RUNNING,
        trainer=TrainerStatus(pid=4242, alive=True, launches=1, seconds_running=at - T0),
        metrics=Metrics(step=step, iter_num=4 * step, tokens=step * 1024, loss=loss, val_loss=5.9,
                        best_val_loss=5.9, best_val_step=20, tokens_per_sec=1800.0, baseline_tokens_per_sec=2000.0),
        seconds_since_progress=1.5, hang_timeout_s=60.0,
        disk=DiskStatus(free_bytes=12_500_000_000, total_bytes=50_000_000_000),
        checkpoints=CheckpointStatus(count=2, newest_step=40, newest_verified_step=40, last_size_bytes=1000),
    )


def test_live_view_renders_step_of_total_loss_state_and_the_incident(finished_run):
    console = Console(record=True, width=100, force_terminal=False)
    view = LiveView(load_config(finished_run), console=console)
    view(Transition(RunPhase.STARTING, RunPhase.RUNNING, "launch 1 (pid 4242) from scratch"))
    for i, step in enumerate(range(30, 43)):
        view(Observed(snapshot(step, T0 + 2 * i, 4.8123)))
    console.print(view.render())
    text = console.export_text()
    assert "[running] launch 1 (pid 4242) from scratch" in text          # history line above the panel
    assert "42 / 100" in text and "42%" in text and "ETA 1 min 56 s" in text   # 58 steps at 0.5 step/s
    assert "train 4.8123" in text and "val 5.9000" in text
    assert "1,800 tok/s" in text and "90% of baseline 2,000" in text
    assert "12.5 GB free (25%)" in text and "step 40 verified" in text
    assert "running" in text and "incident    none" in text

    record = incident(7, "preemption", 42, 40, T0 + 30)
    record.update(outcome="open", actions=[], plan=[{"index": 0, "verb": "verify_checkpoints", "description": "verify every checkpoint"},
                                                    {"index": 1, "verb": "resume", "description": "restart the trainer"}])
    view(IncidentOpened(Incident.model_validate(record).view()))
    view(Transition(RunPhase.RUNNING, RunPhase.RECOVERING, "incident-7"))
    record["actions"].append({"index": 0, "verb": "verify_checkpoints", "ok": True, "summary": "all checkpoints verified"})
    view(ActionDone(Incident.model_validate(record).view(), ActionResult(**{k: record["actions"][0][k] for k in ("verb", "ok", "summary")})))
    console.print(view.render())
    text = console.export_text()
    assert "recovering" in text and "incident-7 preemption at step 42: under way" in text
    assert "now: restart the trainer" in text

    view(Transition(RunPhase.RECOVERING, RunPhase.RUNNING, "incident-7 recovered"))
    console.print(view.render())
    assert "recovered; waiting for the first progress line" in console.export_text()

    record.update(outcome="recovered", recovery_seconds=7.5, steps_lost=2)
    view(IncidentClosed(Incident.model_validate(record).view()))
    console.print(view.render())
    assert "incident-7 preemption at step 42: recovered in 7.5 s, 2 steps lost" in console.export_text()


def test_live_view_starts_and_stops_as_a_context_manager(finished_run):
    console = Console(record=True, width=100, force_terminal=True)
    with LiveView(load_config(finished_run), console=console, refresh_per_second=20) as view:
        view(Observed(snapshot(10, time.time(), 5.5)))
        time.sleep(0.15)
    assert "10 / 100" in console.export_text()


@pytest.mark.parametrize("state,watcher_running,trainer,code", [
    ("completed", False, {"alive": False}, 0),
    ("escalated", False, {"alive": False}, 4),
    ("stopped", False, {"alive": False}, 7),
    ("running", True, {"alive": True, "supervised": True}, 13),
    ("running", False, {"alive": False}, 12),
    # A watcher killed between launching a trainer and journaling "running" leaves the previous "stopped":
    # the trainer it left behind runs on unsupervised, and that is what the exit code must say.
    ("stopped", False, {"alive": True, "supervised": False}, 12),
    ("escalated", False, {"alive": True, "supervised": False}, 12),
])
def test_status_code_puts_an_unsupervised_trainer_before_a_stale_state(state, watcher_running, trainer, code):
    from runbook.commands.status_view import status_code
    assert int(status_code({"state": state, "watcher": {"running": watcher_running}, "trainer": trainer})) == code
