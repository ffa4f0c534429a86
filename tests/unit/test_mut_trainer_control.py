"""engine/process/trainer_control.py through its public methods (benchmarks/bench_mutation.py's survivors): a
real toy trainer launched, reported on, refused a second time, taken back by a new watcher and stopped; the
environment remedies give later launches (kept, diagnostic, lifted, restored) and when their effect is due;
what a control with no trainer says. Everything it does is read back from the real journal."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import time

import psutil

import pytest

from engine.core.state import TrainerStatus
from engine.core.write_trouble import WriteTrouble
from engine.process import trainer_control
from engine.process.identity import SecondTrainerRefused
from engine.process.ranks import RankExit, RankHeartbeat, exit_path, heartbeat_path, write_record
from engine.process.trainer_control import TrainerControl, process_started
from engine.process.trainer_env import short_link_name
from engine.process.warm_spare import SparePool
from engine.records.journal import Journal
from engine.trainers import adapter_for
from engine.trainers.run_config import load_config
from tests.conftest import TOY_KIND, fill, make_toy_project

CRASHING = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}   # known to crash on the CPU (engine/process/env_changes.py)


def control_of(project, adapter=None, trouble=None) -> TrainerControl:
    loaded = load_config(project.config)
    return TrainerControl(loaded, adapter or adapter_for(TOY_KIND), Journal(loaded.folder.journal), "sha256:test",
                          trouble)


def kinds(control: TrainerControl) -> list[str]:
    return [e["kind"] for e in control.journal.entries()]


def last(control: TrainerControl, kind: str) -> dict:
    return [e for e in control.journal.entries() if e["kind"] == kind][-1]


@pytest.fixture
def cpu_project(tmp_path):
    # a long project path: the launch's TMPDIR gets a short link (engine/process/trainer_env.py)
    project = make_toy_project(tmp_path / ("p" * 70) / "project", step_seconds=1.0)
    project.set(trainer={"device": "cpu"})
    return project


def test_a_control_without_a_trainer_says_so(cpu_project):
    control = control_of(cpu_project)
    assert control.launches == 0 and not control.alive and control.folder == control.loaded.folder
    assert isinstance(control.trouble, WriteTrouble) and isinstance(control.spares, SparePool)
    assert control.stop("nothing to stop") == "no trainer" and kinds(control) == []
    assert control.status() == TrainerStatus(launches=0, exit_code=None, signal=None)
    control.past_exit = (-15, "SIGTERM")                     # what an earlier watcher saw
    assert control.status() == TrainerStatus(launches=0, exit_code=-15, signal="SIGTERM")
    trouble = WriteTrouble()
    assert control_of(cpu_project, trouble=trouble).trouble is trouble
    control.refuse_second_trainer()                          # nothing runs: no refusal
    assert control.adopt_unjournaled() is None


def test_a_progress_line_means_what_the_adapter_says_or_one_micro_batch_on_every_rank(cpu_project):
    # a script's and HF's word: tests/unit/test_mut_trainers_script.py, test_mut_trainers_hf.py
    cfg = load_config(cpu_project.config).config
    litgpt = control_of(cpu_project, adapter=adapter_for("litgpt")).progress_meaning
    micro = cfg.micro_batch_size * cfg.model.block_size * cfg.trainer.devices * cfg.trainer.num_nodes
    assert litgpt.tokens_per_iter == litgpt.timed_tokens == micro
    assert litgpt.step_tokens == cfg.batch_size * cfg.model.block_size
    silent = control_of(cpu_project, adapter=object()).progress_meaning   # an adapter that declares nothing
    assert silent.tokens_per_iter == micro


def test_kept_and_diagnostic_variables_the_newest_setting_of_a_name_decides(cpu_project):
    control = control_of(cpu_project)
    assert control.set_env({"A": "1", "C": "x"}) == []
    assert control.set_env({"B": "2", "A": "3"}, diagnostic=True, incident="incident-1") == []
    assert (control.extra_env, control.diagnostic_env) == ({"C": "x"}, {"B": "2", "A": "3"})
    control.set_env({"B": "4"})
    assert (control.extra_env, control.diagnostic_env) == ({"C": "x", "B": "4"}, {"A": "3"})
    assert control.env_in_force() == {"C": "x", "B": "4", "A": "3"}
    assert last(control, "env")["vars"] == {"B": "4"} and last(control, "env")["diagnostic"] is False
    control.restore_env({"A": None, "B": "0", "D": None}, "the remedy did not help")
    assert (control.extra_env, control.diagnostic_env) == ({"C": "x", "B": "0"}, {})
    assert last(control, "env_restored")["values"] == {"A": None, "B": "0", "D": None}


def test_a_variable_known_to_crash_here_is_replaced_and_said(cpu_project):
    control = control_of(cpu_project)
    notes = control.set_env(CRASHING)
    assert control.extra_env == {"TORCH_DISTRIBUTED_DEBUG": "INFO"} and len(notes) == 1 and "DETAIL" in notes[0]
    assert last(control, "env")["notes"] == notes


def test_an_env_effect_and_diagnostics_are_due_only_on_the_launch_that_carries_them(cpu_project):
    control = control_of(cpu_project)
    control.note_env_change("incident-2", ["B", "A"], 1000.0)
    assert control.env_effect_pending == {"incident": "incident-2", "names": ["A", "B"], "before": 1000.0, "launch": None}
    assert not control.env_effect_due(5, 100)                # no launch carries it yet
    assert not control.diagnostics_due(5, 100)               # no diagnostic variables
    control.set_env({"NCCL_DEBUG": "INFO"}, diagnostic=True)
    try:
        control.launch(None)
        assert control.env_effect_pending["launch"] == 1 and control.diagnostics_carried_by == 1
        assert control.env_effect_due(5, 5) and not control.env_effect_due(5, 4)
        assert control.diagnostics_due(5, 5) and not control.diagnostics_due(5, 4)
    finally:
        control.stop("test over")
    entry = control.record_env_effect(2000.0)
    assert entry == {"incident": "incident-2", "names": ["A", "B"], "launch": 1, "tokens_per_sec_before": 1000.0,
                     "tokens_per_sec_after": 2000.0}
    assert {k: v for k, v in last(control, "env_effect").items() if k not in ("time", "kind")} == entry
    assert control.env_effect_pending is None and not control.env_effect_due(5, 5)
    assert control.lift_diagnostics("healthy") == {"NCCL_DEBUG": "INFO"}
    assert control.diagnostic_env == {} and control.diagnostics_carried_by is None and not control.diagnostics_due(5, 5)
    assert last(control, "env_lifted")["names"] == ["NCCL_DEBUG"]


def test_a_launch_is_journaled_refused_twice_taken_back_by_a_new_watcher_and_stopped(cpu_project):
    control = control_of(cpu_project)
    control.set_env(CRASHING)
    control.extra_env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"   # an older journal's set_env, replayed as it was
    tmpdir = cpu_project.root / "tmp"                          # too long for a socket path: given a short link
    tmpdir.mkdir()
    control.set_env({"TMPDIR": str(tmpdir)})
    process = control.launch(None)
    try:
        assert process is control.process and control.alive and control.launches == 1
        assert (control.folder.launch_dir(1) / "run_config.yaml").is_file()
        assert control.folder.trainer_pid.read_text() == f"{process.pid}\n"
        launch = last(control, "launch")
        assert (launch["launch"], launch["pid"], launch["resume_from"]) == (1, process.pid, None)
        assert abs(launch["started"] - process_started(process.pid)) < 1.0
        assert "TORCH_DISTRIBUTED_DEBUG" in last(control, "env_lowered")["note"]
        status = control.status()
        assert (status.pid, status.alive, status.exit_code, status.launches, status.stopped) == (process.pid, True, None, 1, False)
        assert not status.exit_pending and 0 <= status.seconds_running < 60
        with pytest.raises(SecondTrainerRefused, match=f"trainer pid {process.pid} of this run is still running"):
            control.launch(None)
        assert control.launches == 1

        assert control.long_tmpdir == str(tmpdir)
        link = short_link_name(control.long_tmpdir)
        assert len(control.long_tmpdir) > 64 and link.is_symlink()
        control.release_tmpdir_link()                    # the trainer still uses it
        assert link.is_symlink()

        other = control_of(cpu_project)                  # a second watcher of the same run folder
        with pytest.raises(SecondTrainerRefused, match=f"already running \\(pid {process.pid}"):
            other.refuse_second_trainer()
        newer = control_of(cpu_project)                  # a watcher whose journal lost the launch
        newer.launches = 0
        adopted = newer.adopt_unjournaled()
        assert adopted is newer.process and adopted.pid == process.pid and newer.launches == 1
        entry = last(newer, "launch")
        assert entry["adopted"] is True and entry["pid"] == process.pid and entry["launch"] == 1
        assert newer.adopt_unjournaled() is None         # journaled now: nothing more to take back
        assert "ranks_stopped" not in kinds(control)    # no rank outlived an earlier trainer
        rank = subprocess.Popen(["sleep", "60"])        # a rank that will outlive rank 0 (a stopped one, an orphan)
        control.ranks.folder.mkdir(parents=True, exist_ok=True)
        write_record(heartbeat_path(control.ranks.folder, 1), RankHeartbeat(
            rank=1, world_size=2, pid=rank.pid, started=psutil.Process(rank.pid).create_time(), time=time.time(),
            host=socket.gethostname()))
    finally:
        text = control.stop("test over")
    assert rank.wait(timeout=5) == -signal.SIGKILL
    assert text.endswith(f"; stopped the ranks left over: rank 1 (pid {rank.pid})"), text
    assert last(control, "ranks_stopped")["ranks"] == [f"rank 1 (pid {rank.pid})"]
    assert last(control, "trainer_stopped")["reason"] == "test over"
    status = control.status()
    assert not status.alive and status.exit_code is not None and status.pid == process.pid
    exit_status = control.folder.exit_status(1)
    record = json.loads(exit_status.read_text())
    assert (status.ranks.ranks[0].exit_code, status.ranks.ranks[0].ended_at) == (status.exit_code, record["ended"])
    del record["ended"]                                  # a launcher record that does not say when it ended
    exit_status.write_text(json.dumps(record))
    assert control.status().ranks.ranks[0].exit_code is None
    control.release_tmpdir_link()                        # no trainer now: the link goes
    assert not link.is_symlink()


def test_every_rank_gone_a_moment_ago_is_an_exit_pending_while_the_launcher_runs(cpu_project):
    control = control_of(cpu_project)
    control.launch(None)
    try:
        folder = control.ranks.folder
        folder.mkdir(parents=True, exist_ok=True)
        now = time.time()
        for rank in (0, 1):
            gone = subprocess.Popen(["true"])
            gone.wait()
            write_record(heartbeat_path(folder, rank), RankHeartbeat(
                rank=rank, world_size=2, pid=gone.pid, started=now - 5, time=now - 1, host=socket.gethostname()))
            write_record(exit_path(folder, rank), RankExit(rank=rank, pid=gone.pid, exit_code=1, ended=now))
        status = control.status()
        assert status.alive and status.exit_pending and not status.stopped
    finally:
        control.stop("test over")


class FullDiskAdapter:
    """The toy adapter whose launch files meet a full disk `fails` times (errno `code`), then are written."""

    def __init__(self, fails: int, code: int = errno.ENOSPC):
        self.inner, self.fails, self.code = adapter_for(TOY_KIND), fails, code

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def prepare_launch(self, *args):
        if self.fails:
            self.fails -= 1
            raise OSError(self.code, os.strerror(self.code))
        return self.inner.prepare_launch(*args)


def test_a_launch_onto_a_full_run_folder_waits_for_space(cpu_project):
    control = control_of(cpu_project, adapter=FullDiskAdapter(1))
    control.folder.launch_dir(1).mkdir(parents=True)   # left by a watcher killed before its journal knew launch 1
    started = time.monotonic()
    try:
        control.launch(None)
        assert control.alive and time.monotonic() - started >= 0.5
    finally:
        control.stop("test over")


def test_a_launch_onto_a_full_run_folder_fails_once_the_wait_is_over(cpu_project, monkeypatch):
    monkeypatch.setattr(trainer_control, "LAUNCH_SPACE_WAIT_S", 0.0)
    control = control_of(cpu_project, adapter=FullDiskAdapter(1))
    with pytest.raises(OSError) as raised:
        control.launch(None)
    assert raised.value.errno == errno.ENOSPC and control.process is None


def test_a_launch_error_that_is_not_a_full_disk_fails_at_once(cpu_project):
    control = control_of(cpu_project, adapter=FullDiskAdapter(1, errno.EACCES))
    started = time.monotonic()
    with pytest.raises(PermissionError):
        control.launch(None)
    assert time.monotonic() - started < 0.5


def test_process_started_of_a_gone_pid_is_none():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert process_started(proc.pid) is None
    assert abs(process_started(os.getpid()) - psutil.Process().create_time()) < 1e-6


# --- a real full disk (a small tmpfs, root only: tests/conftest.py's tmpfs) ---------------------------------


def test_a_launch_folder_too_full_for_the_config_copy_launches_without_it_and_says_so(tmp_path, tmpfs):
    project = make_toy_project(tmp_path / "project", step_seconds=1.0)
    project.set(trainer={"device": "cpu"})
    with open(project.config, "a") as fh:   # a run config bigger than the launch folder's free space
        fh.write("".join(f"# padding line {i:06d} {'x' * 80}\n" for i in range(3000)))
    control = control_of(project)
    tmpfs(control.folder.launch_dir(1), "64k")   # room for the toy's launch files, not for a 270 KB copy
    try:
        control.launch(None)
        assert control.alive and not (control.folder.launch_dir(1) / "run_config.yaml").exists()
        assert "launch copies" in control.trouble.failing
    finally:
        control.stop("test over")


def test_a_trainer_taken_back_on_a_full_run_folder_leaves_no_stale_pid_file(tmp_path, tmpfs):
    project = make_toy_project(tmp_path / "project", step_seconds=1.0)
    project.set(trainer={"device": "cpu"})
    control = control_of(project)
    run_dir = tmpfs(control.folder.root, "4m")
    filler = None
    try:
        process = control.launch(None)
        control.folder.trainer_pid.unlink()        # its watcher died before writing it
        filler = fill(run_dir)
        newer = control_of(project)
        newer.launches = 0
        adopted = newer.adopt_unjournaled()        # the journal line is held in memory meanwhile
        assert adopted is not None and adopted.pid == process.pid
        assert not newer.folder.trainer_pid.exists() and "trainer.pid" in newer.trouble.failing
    finally:
        if filler is not None:
            filler.unlink()
        control.stop("test over")
