"""runbook deletes only what it wrote: a real run (the toy trainer), SIGKILLed mid-run, recovered in an
out_dir shared with other people's files; the litgpt trainer's own logger folder is not taken for
another's; and the out_dir/run_dir values refused at config load."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from engine.checkpoints.store import own_tmp_prefix
from tests.conftest import REPO, RUNBOOK, stop_process, wait_for

ENV = {"PYTHONPATH": str(REPO)}   # the watcher (and any command reading the config) imports tests.toy_trainer

FOREIGN = {
    "tmpUserNotes.txt": b"meeting notes, do not delete\n",
    "tmp8f3k2l": bytes(range(256)) * 4,                       # another tool's mkstemp file
    "tmp-runbook-someone-else/state.json": b'{"owner": "someone else"}\n',
    "notes.md": b"# my notes\n",
}


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_kill_9_mid_run_is_recovered_and_files_runbook_did_not_write_are_left_alone(project):
    # No "killed" in this test's name: it would be in out_dir's path, and the oom playbook's log pattern
    # `Killed` (ignore_case) would match the path in the trainer's save announcements.
    project.set(trainer={"extra": {"step_seconds": 0.2, "notice_save": True}})   # 20 steps (4 s) after checkpoint 20
    out = project.out_dir
    for rel, data in FOREIGN.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    # A leftover of ours (a watcher killed while it re-pointed `last`): this one may go, and is reported.
    stale = out / f"{own_tmp_prefix(out)}last-0123456789ab"
    stale.symlink_to(project.layout.folder_name(10))
    watcher = project.watch(env=ENV)
    try:
        wait_for(lambda: project.saved(20), 120, what="checkpoint 20")
        os.kill(project.trainer_pid(), signal.SIGKILL)
        assert not (out / "final").exists(), "the toy finished first: slow its pace"
        assert watcher.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(watcher)

    for rel, data in FOREIGN.items():
        assert (out / rel).read_bytes() == data, rel
    assert sorted(p.name for p in (out / "tmp-runbook-someone-else").iterdir()) == ["state.json"]
    assert not stale.is_symlink()
    assert project.final_progress()["step_count"] == 40

    killed = [i for i in project.incidents() if i["playbook"] == "killed"]
    assert killed, [i["playbook"] for i in project.incidents()]
    incident = killed[0]
    assert incident["trainer_exit_code"] == -signal.SIGKILL and incident["outcome"] == "recovered"
    assert sorted(incident["left_alone"]) == sorted(["notes.md", "tmp-runbook-someone-else", "tmp8f3k2l", "tmpUserNotes.txt"])
    assert incident["deleted"] == [stale.name], incident["deleted"]   # runbook's own leftover, and nothing else
    prune = next(a for a in incident["actions"] if a["verb"] == "prune_checkpoints")
    # The summary says what went, and names what stayed.
    assert f"deleted 1 temporary file(s) of runbook's ({stale.name})" in prune["summary"], prune["summary"]
    assert "deleted 0 checkpoint(s)" in prune["summary"]
    assert "left alone 4 item(s)" in prune["summary"] and "tmpUserNotes.txt" in prune["summary"]
    assert any("tmpUserNotes.txt" in note for note in incident["notes"])
    output = project.watch_output()
    assert "left alone 4 item(s)" in output and "tmp-runbook-someone-else" in output


def test_the_litgpt_trainers_logger_folder_is_its_own_and_kept(tmp_path):
    """litgpt's CSV logger writes <out_dir>/logs/ (its layout's trainer_folders): neither another's file to
    report nor a temporary to delete, beside a stranger's folder that is both (what litgpt writes there is
    the litgpt contract suite's, tests/litgpt/)."""
    from engine.checkpoints.partial_saves import find_partial_saves
    from engine.trainers import adapter_for

    out = tmp_path / "out"
    (out / "logs" / "csv" / "version_0").mkdir(parents=True)
    (out / "logs" / "csv" / "version_0" / "metrics.csv").write_text("step,loss\n")
    (out / "notes").mkdir()
    cleanup = find_partial_saves(out, set(), layout=adapter_for("litgpt").layout)
    assert (cleanup.foreign, cleanup.temps, cleanup.partial) == (["notes"], [], [])
    assert find_partial_saves(out, set(), layout=adapter_for("python:tests.toy_trainer.adapter:ToyAdapter").layout
                              ).foreign == ["logs", "notes"]   # a trainer that writes no logs/ owns none


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.is_dir(), p.lstat().st_size) for p in root.rglob("*")}


REFUSED = [
    ("out_dir", "/", "is a system folder"),
    ("out_dir", "{home}", "is your home folder"),
    ("out_dir", ".", "is the project folder"),
    ("out_dir", "/tmp", "is a system folder"),
    ("out_dir", "/usr", "is a system folder"),
    ("out_dir", "..", "holds the run config"),
    ("out_dir", "configs", "holds the run config"),
    ("out_dir", "data", "holds data.train_dir"),
    ("out_dir", "data/train", "is data.train_dir"),
    ("out_dir", "data/tokenizer/cache", "is inside data.tokenizer_dir"),
    ("out_dir", "runs/pretrain", "is also run_dir"),
    ("out_dir", "runs/pretrain/checkpoints", "is inside run_dir"),
    ("out_dir", "runs", "run_dir: {run_dir} is inside out_dir"),
    ("run_dir", "/", "is a system folder"),
    ("run_dir", ".", "is the project folder"),
    ("run_dir", "/var/tmp", "is a system folder"),
    ("run_dir", "checkpoints/pretrain/run", "run_dir: {run_dir} is inside out_dir"),
    ("run_dir", "data", "holds data.train_dir"),
]


@pytest.mark.parametrize("key,value,reason", REFUSED, ids=[f"{k}={v}" for k, v, _ in REFUSED])
def test_a_folder_runbook_cannot_own_is_refused_at_load_with_exit_3(project, key, value, reason):
    value = value.format(home=Path.home())
    project.set(**{key: value})
    if reason.startswith("run_dir: "):  # a nested pair: the inner folder is the one named
        key, reason = "run_dir", reason.format(run_dir=os.path.realpath(project.root / "runs" / "pretrain")
                                               if value == "runs" else os.path.realpath(project.root / value))
    before = _tree(project.root)
    done = subprocess.run([RUNBOOK, "watch", str(project.config)], capture_output=True, text=True, timeout=60,
                          cwd=project.root, env={**os.environ, **ENV})
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"{project.config}:") and f": {key}: " in lines[0] and reason in lines[0], lines[0]
    assert _tree(project.root) == before  # nothing created
