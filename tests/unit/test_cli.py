"""The command table and the small commands."""

from __future__ import annotations

import pytest

import json
import os
import shutil
import subprocess
from pathlib import Path

from typer.main import get_command

from runbook.cli import app
from tests.conftest import REPO, RUNBOOK


# `project` and `reference_run` are the toy trainer's (tests/conftest.py): a command run on them imports the
# toy's adapter from this repository.
TOY_ENV = {**os.environ, "PYTHONPATH": str(REPO)}


EXPECTED_COMMANDS = {"watch", "check", "init", "replay", "scan-data", "verify", "playbooks", "incidents", "drill", "status", "report",
                     "notify", "ledger", "slurm", "triage"}


def test_the_command_table_is_what_the_docs_promise():
    assert set(get_command(app).commands) == EXPECTED_COMMANDS
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert all(f"runbook {name}" in readme for name in EXPECTED_COMMANDS)


def test_verify_reports_each_checkpoint_and_fails_on_a_truncated_one(reference_run, tmp_path):
    """Through the run's config (its out_dir, its trainer's layout: the toy's ckpt-NNNNNN, checked against its
    checksum), then a folder of copies with -c for the layout. litgpt's own check (the zip CRC scan) is
    tests/unit/test_checkpoints.py's and tests/litgpt/'s; a bare OUT_DIR, litgpt's layout, test_hostile_cli's."""
    run = reference_run["project"]
    env = {**TOY_ENV, "COLUMNS": "200", "PYTHONIOENCODING": "utf-8"}   # a table row per line, drawn with │
    good = subprocess.run([RUNBOOK, "verify", str(run.config)], capture_output=True, text=True, timeout=60, env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    steps = [5 * k for k in range(1, 9)]   # 40 steps, a checkpoint every 5
    assert table_rows(good.stdout) == {run.layout.folder_name(s) + (" (last)" if s == 40 else ""): "ok" for s in steps}
    assert f"{len(steps)} checkpoint(s), 0 corrupt" in good.stdout

    copy = tmp_path / "out"
    copy.mkdir()
    for step in (10, 20):
        shutil.copytree(run.step_dir(step), copy / run.layout.folder_name(step))
    state = copy / run.layout.folder_name(20) / "state.json"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 3])
    bad = subprocess.run([RUNBOOK, "verify", str(copy), "-c", str(run.config)], capture_output=True, text=True,
                         timeout=60, env=env)
    assert bad.returncode == 8, bad.stdout + bad.stderr
    rows = table_rows(bad.stdout)
    assert rows.keys() == {run.layout.folder_name(10), run.layout.folder_name(20)}, bad.stdout
    assert rows[run.layout.folder_name(10)] == "ok" and rows[run.layout.folder_name(20)].startswith("CORRUPT"), bad.stdout
    assert "2 checkpoint(s), 1 corrupt" in bad.stdout


def table_rows(text: str) -> dict[str, str]:
    """`runbook verify`'s table: {checkpoint cell: status cell}."""
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]
    return {cells[0]: cells[-1] for cells in rows if cells[0] != "checkpoint"}


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_drill_preemption_recovers_on_a_scratch_copy_and_leaves_the_run_alone(project):
    # 0.2 s a step: the drill's SIGTERM after the second checkpoint (step 20 of 40) finds the trainer mid-run.
    project.set(trainer={"extra": {"step_seconds": 0.2, "notice_save": True}})
    before = project.config.read_text()
    result = subprocess.run([RUNBOOK, "drill", "preemption", "--config", str(project.config)],
                            capture_output=True, text=True, timeout=600, env=TOY_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "recovered: True" in result.stdout
    assert "preemption recovered" in result.stdout
    # The SIGTERM is a notice: the trainer finishes its step and saves it before it exits, so nothing is
    # lost, and the incident opens when it has exited (the step and the save are inside "detection").
    assert result.stdout.split("steps_lost: ")[1].split()[0] == "0", result.stdout
    detection = float(result.stdout.split("detection_s: ")[1].split()[0])
    assert 0 <= detection < 15.0
    assert project.config.read_text() == before          # the original config is untouched
    assert not project.out_dir.exists()                  # and nothing was trained in the real run
    [report] = list((project.run_dir.parent / "drills").glob("preemption-*/drill-report.json"))
    scratch = report.parent
    # The scratch run trained the drill's budget to the end on the toy (its final state) after the notice save.
    assert json.loads((scratch / "checkpoints" / "pretrain" / "final" / "state.json").read_text())["step"] == 40


def test_a_drills_scratch_run_links_the_runs_tokenized_data(tmp_path):
    """litgpt's tokenized data cache (run_dir/data/<key>/): a drill's scratch project gets the run's complete
    caches as hard links, never a second tokenization (engine/trainers/litgpt/data_cache.py). The caches here
    are laid out as litgpt's are; their bytes are not read."""
    from engine.trainers.run_config import load_config
    from engine.watch.faults import FAULTS
    from runbook.commands.drill_cmd import make_scratch_project

    root = tmp_path / "project"
    (root / "configs").mkdir(parents=True)
    shutil.copy(REPO / "configs" / "run_config.yaml", root / "configs" / "run_config.yaml")   # trainer.kind: litgpt
    loaded = load_config(root / "configs" / "run_config.yaml")
    assert loaded.config.trainer.kind == "litgpt"
    for key in ("key-a", "key-b"):
        for split in ("train", "val"):
            (loaded.run_dir / "data" / key / split / split).mkdir(parents=True)
            (loaded.run_dir / "data" / key / split / split / "index.json").write_text(f'{{"{key}": "{split}"}}')
    scratch_config = make_scratch_project(loaded, FAULTS["preemption"], tmp_path / "drill")
    scratch_caches = sorted((load_config(scratch_config).run_dir / "data").iterdir())
    assert [c.name for c in scratch_caches] == ["key-a", "key-b"]
    index = Path("train") / "train" / "index.json"
    assert all((c / index).stat().st_ino == (loaded.run_dir / "data" / c.name / index).stat().st_ino for c in scratch_caches)


# --- one grammar: every command that reads a run takes CONFIG as a positional, -c or --config ------
NOT_A_RUN = {"playbooks", "init", "ledger"}   # playbooks: files of playbooks (-c names a run config there too); init
# writes one; ledger: run folders (-c names a run config there too)
FORMS = {   # the arguments before the config, when a command needs some; any other command: `runbook NAME CONFIG`
    "incidents show": ["incidents", "show", "incident-1"],
    "replay --all": ["replay", "--all"],
    "replay": ["replay", "incident-1"],
    "drill": ["drill", "preemption"],
    "slurm": ["slurm", "submit"],
    "triage": ["triage", __file__],   # LOG first (any readable file), then the config
}


def _invoke(args: list[str]):
    """In process, with runbook.cli.main's own handling of a SourceError (exit 3, the message)."""
    from typer.testing import CliRunner

    from engine.core.yaml_source import SourceError

    result = CliRunner().invoke(app, args)
    if isinstance(result.exception, SourceError):
        return 3, "\n".join(result.exception.messages)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def _run_commands() -> dict[str, list[str]]:
    top = {name: [name] for name in get_command(app).commands if name not in NOT_A_RUN}
    return {**top, **FORMS}


def test_every_command_that_reads_a_run_takes_the_config_as_positional_c_or_config(tmp_path):
    # A config that does not exist, while the current folder has configs/run_config.yaml (the default):
    # exit 3 naming it proves the command read the config it was given, each way.
    missing = str(tmp_path / "elsewhere" / "configs" / "run_config.yaml")
    for name, before in _run_commands().items():
        for args in ([*before, missing], [*before, "-c", missing], [*before, "--config", missing]):
            code, output = _invoke(args)
            assert code == 3 and missing in output.replace("\n", ""), (args, code, output)


def test_a_group_takes_its_config_before_the_subcommand_too(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    code, output = _invoke(["incidents", "-c", missing, "show", "incident-1"])
    assert code == 3 and missing in output.replace("\n", ""), output


def test_two_different_configs_are_a_usage_error(tmp_path):
    code, output = _invoke(["status", str(tmp_path / "a.yaml"), "-c", str(tmp_path / "b.yaml")])
    assert code == 2 and "two run configs given" in output


@pytest.mark.slow
def test_the_same_run_read_each_way_says_the_same(tmp_path):
    from tests.runs.test_toy_trainer import make_toy_project, run_toy

    project = make_toy_project(tmp_path / "project", step_seconds=0.0)
    run_toy(project)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    answers = []
    for args in ([str(project.config)], ["-c", str(project.config)], []):   # [] : the default, from the project
        done = subprocess.run([RUNBOOK, "status", "--json", *args], capture_output=True, text=True, timeout=60,
                              cwd=project.root, env=env)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        answer["progress"].pop("seconds_since_log_written")
        answers.append({k: v for k, v in answer.items() if k not in ("disk", "heartbeat", "last_transition")})   # clocks
    assert answers[0] == answers[1] == answers[2] and answers[0]["state"] == "completed"


def test_shell_completion_is_offered():
    assert "--install-completion" in subprocess.run([RUNBOOK, "--help"], capture_output=True, text=True, timeout=30).stdout
