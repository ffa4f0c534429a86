"""Evidence beyond the log text (engine/observe/evidence.py), measured for real and decided by the
shipped playbooks: a tmpfs filled by a real failed torch.save, a process the kernel OOM killer
kills in a memory-limited cgroup (v2 or v1; CI runs as root) next to one killed by a plain SIGKILL,
and a real load of a truncated checkpoint next to one of an intact checkpoint into the wrong shape.
What the machine does not allow (no root, no mount, no cgroup) is skipped with its reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
import uuid
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from engine.observe.throughput import ProgressMeaning
from engine.checkpoints.catalog import CheckpointCatalog
from engine.core.run_folder import RunFolder
from engine.core.state import CheckpointStatus, RunPhase, StateSnapshot, TrainerStatus
from engine.language.loader import playbook_files, read_playbook_files
from engine.language.matcher import AttemptHistory, MatchMemory, decide
from engine.language.playbook_testing import build_config
from engine.observe.evidence import (
    EvidenceGatherer,
    KernelLog,
    OomCounter,
    kernel_verdict,
    nearly_full,
    oom_counter_of,
    oom_verdict,
    read_kernel_oom_kills,
)
from engine.observe.observer import Observer
from engine.trainers.litgpt.adapter import LitGPTAdapter
from runbook.cli import app
from tests.conftest import REPO, require_capability
from tests.unit.test_checkpoints import make_ckpt

PLAYBOOKS = ["oom", "killed", "disk_full", "disk_low", "corrupt_checkpoint", "unknown_crash", "preemption", "hang"]
DEAD_BY_SIGKILL = TrainerStatus(pid=None, alive=False, exit_code=-9, signal="SIGKILL")


def decided(snapshot: StateSnapshot) -> str | None:
    """The shipped playbooks' decision (those these failures involve, with all they inhibit)."""
    playbooks, errors = read_playbook_files(playbook_files([REPO / "playbooks" / f"{n}.yaml" for n in PLAYBOOKS]))
    assert not errors, errors
    outcome = decide(snapshot, build_config({}), playbooks, MatchMemory(), AttemptHistory())
    return outcome.decision.playbook.name if outcome.decision else None


# --- free space --------------------------------------------------------------------------------
@pytest.fixture
def tmpfs():
    mounted: list[Path] = []

    def mount(where: Path, size: str) -> Path:
        if os.geteuid() != 0:
            require_capability("mounting a tmpfs needs root")
        where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            require_capability(f"mount refused: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)])


def failed_save(path: Path) -> list[str]:
    """A real torch.save that the disk cuts short: the traceback lines a trainer would print."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        torch.save({"w": torch.randn(1024, 1024)}, path)   # 4 MB
    except Exception:   # noqa: BLE001 - whatever torch raises is the point
        return traceback.format_exc().splitlines()
    raise AssertionError(f"{path} fitted: the disk was not full")


def test_nearly_full_thresholds():
    gb = 10**9
    assert nearly_full(50 * 10**6, 100 * gb) and not nearly_full(2 * gb, 100 * gb)   # under 1% of it
    assert nearly_full(60 * 2**20, 2 * gb) and not nearly_full(200 * 2**20, 2 * gb)  # under 64 MiB on 2 GB
    assert nearly_full(300_000, 8 * 10**6) and not nearly_full(1_000_000, 8 * 10**6)  # 5% of a tiny filesystem
    assert nearly_full(3 * gb, 100 * gb, checkpoint_bytes=4 * gb)                      # the next save would not fit


def test_a_real_failed_save_on_a_full_tmpfs_is_disk_full_whatever_torch_says(tmpfs, tmp_path):
    out_dir = tmpfs(tmp_path / "out", "3m")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    gatherer = EvidenceGatherer(out_dir, run_dir)
    assert gatherer.gather(DEAD_BY_SIGKILL).disk_nearly_full is False   # an empty 3 MB tmpfs has room

    tail = failed_save(out_dir / "step-00000040" / "lit_model.pth")
    assert not any("No space left" in line or "Errno 28" in line for line in tail), tail   # torch's own words only
    evidence = gatherer.gather(TrainerStatus(alive=False, exit_code=1))
    assert evidence.disk_nearly_full is True and evidence.out_dir_free_bytes < 100_000
    assert evidence.run_dir_free_bytes > 10**6
    # The evidence branch alone decides it: the writer's error, with the words of no known pattern.
    other_words = [line for line in tail if "unexpected pos" not in line and "PytorchStreamWriter" not in line]
    other_words.append("RuntimeError: [enforce fail at inline_container.cc:672] . could not finish the zip archive")
    crash = StateSnapshot(trainer=TrainerStatus(alive=False, exit_code=1), tail=other_words, evidence=evidence)
    assert decided(crash) == "disk-full"
    room = gatherer.gather(TrainerStatus(alive=False, exit_code=1)).model_copy(
        update={"disk_nearly_full": False, "out_dir_free_bytes": 10**12})
    assert decided(crash.model_copy(update={"evidence": room})) == "unknown-crash"


def test_a_full_disk_whose_failed_save_left_an_unreadable_checkpoint_is_disk_full_not_corrupt(tmpfs, tmp_path):
    out_dir = tmpfs(tmp_path / "out", "3m")
    run_dir = tmp_path / "run"
    make_ckpt(out_dir, 20)
    catalog = CheckpointCatalog(out_dir, RunFolder(run_dir), run_dir / "quarantine", LitGPTAdapter())
    assert catalog.refresh() == [] and catalog.verified == {20}   # sealed while there was room
    (out_dir / "step-00000040").mkdir()
    for name in ("model_config.yaml", "hyperparameters.yaml", "tokenizer.json", "tokenizer_config.json"):
        (out_dir / "step-00000040" / name).write_text("x\n")
    tail = failed_save(out_dir / "step-00000040" / "lit_model.pth")
    assert catalog.refresh() == ["step-00000040"]   # the partial save is a checkpoint-format error
    # The trainer had resumed from step 20 (intact) and read the partial step 40 back (a reader's error too).
    tail += ["RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"]
    gatherer = EvidenceGatherer(out_dir, run_dir, catalog.resume_file_corrupt)
    trainer = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    gatherer.launched(trainer.pid, out_dir / "step-00000020" / "lit_model.pth")
    trainer.wait()
    status = catalog.status()
    evidence = gatherer.gather(TrainerStatus(pid=trainer.pid, alive=False, exit_code=1), status)
    assert evidence.disk_nearly_full is True and evidence.resume_checkpoint_corrupt is False
    snapshot = StateSnapshot(trainer=TrainerStatus(pid=trainer.pid, alive=False, exit_code=1), tail=tail,
                             checkpoints=status, evidence=evidence)
    assert status.corrupt_steps == [40]
    assert decided(snapshot) == "disk-full"


# --- the OOM killer ----------------------------------------------------------------------------
def _mounts(kind: str, controller: str | None = None) -> list[tuple[str, str]]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if tail and tail[0] == kind and (controller is None or controller in tail[2].split(",")):
            out.append((fields[3], fields[4]))
    return out


def _own_cgroup(v2: bool) -> str | None:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if (v2 and hierarchy == "0" and not controllers) or (not v2 and "memory" in controllers.split(",")):
            return path
    return None


def _child_cgroup(limit: int) -> tuple[Path | None, str]:
    """A new memory cgroup under this process's own, limited to `limit` bytes without swap."""
    if os.geteuid() != 0:
        return None, "creating a cgroup needs root"
    name = f"runbook-test-{uuid.uuid4().hex[:8]}"
    reasons = []
    for v2 in (True, False):
        own = _own_cgroup(v2)
        mounts = _mounts("cgroup2") if v2 else _mounts("cgroup", "memory")
        for root, point in mounts:
            if own is None or not (root == "/" or own.startswith(root)):
                continue
            parent = Path(point, (own[len(root):] if root != "/" else own).lstrip("/"))
            try:
                if v2:
                    control = parent / "cgroup.subtree_control"
                    if "memory" not in control.read_text().split():
                        control.write_text("+memory")
                child = parent / name
                child.mkdir()
            except OSError as error:
                reasons.append(f"{'v2' if v2 else 'v1'} at {parent}: {error}")
                continue
            try:
                if v2:
                    (child / "memory.max").write_text(str(limit))
                    if (child / "memory.swap.max").exists():
                        (child / "memory.swap.max").write_text("0")
                else:
                    (child / "memory.limit_in_bytes").write_text(str(limit))
                    if (child / "memory.swappiness").exists():
                        (child / "memory.swappiness").write_text("0")
            except OSError as error:
                child.rmdir()
                reasons.append(f"{'v2' if v2 else 'v1'} limit in {child}: {error}")
                continue
            return child, ""
    return None, "; ".join(reasons) or "no memory cgroup mounted"


@pytest.fixture
def memory_cgroup():
    made: list[Path] = []

    def make(limit: int) -> Path:
        child, reason = _child_cgroup(limit)
        if child is None:
            require_capability(f"cannot create a memory cgroup (v2 or v1): {reason}")
        made.append(child)
        return child

    yield make
    for child in made:
        for _ in range(50):
            try:
                child.rmdir()
                break
            except OSError:
                time.sleep(0.1)   # its last process is still being reaped


def _start_in(cgroup: Path, code: str) -> subprocess.Popen:
    procs = cgroup / "cgroup.procs"
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: procs.write_text(str(os.getpid())))


def _snapshot(observer: Observer, trainer: TrainerStatus) -> StateSnapshot:
    return observer.snapshot(time.time(), RunPhase.RUNNING, trainer, CheckpointStatus(), [], build_config({}).watch)


def test_a_process_the_oom_killer_kills_is_oom_and_one_killed_by_hand_is_killed(memory_cgroup, tmp_path):
    cgroup = memory_cgroup(48 * 2**20)
    observer = Observer(LitGPTAdapter(), tmp_path, ProgressMeaning(256), evidence=EvidenceGatherer(tmp_path, tmp_path))

    hog = _start_in(cgroup, "import time; time.sleep(0.5); x = bytearray(512 * 2**20); time.sleep(30)")
    observer.evidence.launched(hog.pid)   # as the supervisor does right after a launch
    counter = observer.evidence.launch.counter
    assert counter is not None and str(counter.path).startswith(str(cgroup)), counter
    assert observer.evidence.launch.baseline == 0
    assert hog.wait(timeout=30) == -signal.SIGKILL
    evidence = _snapshot(observer, TrainerStatus(pid=hog.pid, alive=False, exit_code=-9, signal="SIGKILL")).evidence
    assert evidence.oom_killed is True and "oom_kill 0 -> 1" in evidence.oom_detail, evidence
    snapshot = StateSnapshot(trainer=TrainerStatus(pid=hog.pid, alive=False, exit_code=-9, signal="SIGKILL"),
                             evidence=evidence)
    assert decided(snapshot) == "oom"
    # The counter alone decides, the kernel log aside.
    alone = EvidenceGatherer(tmp_path, kmsg_path=str(tmp_path / "no-kmsg"))
    alone.launch = observer.evidence.launch
    alone.launch.oom = None
    alone.launch.baseline = 0
    assert alone.gather(TrainerStatus(pid=hog.pid, alive=False, exit_code=-9, signal="SIGKILL")).oom_killed is True
    # Where the kernel log is readable, it names the same pid.
    log = read_kernel_oom_kills()
    if log.readable:
        assert kernel_verdict(log, {hog.pid}, alone.launch.since)[0] is True

    # A kill -9 by hand in the same cgroup: no OOM kill counted, so it is `killed`, not `oom`.
    sleeper = _start_in(cgroup, "import time; time.sleep(30)")
    observer.evidence.launched(sleeper.pid)
    time.sleep(0.3)
    os.kill(sleeper.pid, signal.SIGKILL)
    assert sleeper.wait(timeout=10) == -signal.SIGKILL
    evidence = _snapshot(observer, TrainerStatus(pid=sleeper.pid, alive=False, exit_code=-9, signal="SIGKILL")).evidence
    assert evidence.oom_killed is False and "oom_kill 1 -> 1" in evidence.oom_detail, evidence
    snapshot = StateSnapshot(trainer=TrainerStatus(pid=sleeper.pid, alive=False, exit_code=-9, signal="SIGKILL"),
                             evidence=evidence)
    assert decided(snapshot) == "killed"


def test_this_process_cgroup_counter_reads_and_a_plain_sigkill_is_no_oom_kill(tmp_path):
    """Without a cgroup of our own: the real counter of this process's memory cgroup, and the decision
    for a real process killed by SIGKILL in it."""
    counter = oom_counter_of("self")
    if counter is None:
        require_capability("no memory cgroup counter (v2 memory.events / v1 memory.oom_control) readable for this process")
    assert isinstance(counter.read(), int)
    gatherer = EvidenceGatherer(tmp_path, kmsg_path=str(tmp_path / "no-kmsg"))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    gatherer.launched(sleeper.pid)
    assert gatherer.launch.counter == counter   # a child starts in its parent's cgroup
    os.kill(sleeper.pid, signal.SIGKILL)
    sleeper.wait(timeout=10)
    evidence = gatherer.gather(TrainerStatus(pid=sleeper.pid, alive=False, exit_code=-9, signal="SIGKILL"))
    if counter.read() != gatherer.launch.baseline:
        pytest.skip("another process of this cgroup was OOM-killed meanwhile")
    assert evidence.oom_killed is False


def test_oom_verdict_and_the_kernel_log_are_bounded_and_fail_to_unknown(tmp_path):
    counter = OomCounter(tmp_path / "memory.events")
    assert counter.read() is None
    counter.path.write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n")
    assert counter.read() == 2
    assert oom_verdict(2, 3, counter, (None, None))[0] is True
    assert oom_verdict(2, 2, counter, (None, None))[0] is False
    assert oom_verdict(None, 2, counter, (None, None)) == (None, None)
    assert oom_verdict(2, 2, counter, (True, "kernel log: Killed process 7"))[0] is True
    assert kernel_verdict(KernelLog(False), {7}, 0.0) == (None, None)
    log = KernelLog(True, 10.0, ((7, 50.0, "Memory cgroup out of memory: Killed process 7 (python)"),))
    assert kernel_verdict(log, {7}, 40.0)[0] is True
    assert kernel_verdict(log, {8}, 40.0)[0] is False     # reaches back before the launch, names another pid
    assert kernel_verdict(log, {8}, 5.0) == (None, None)  # too short to tell
    started = time.monotonic()
    read_kernel_oom_kills()   # readable or not, it returns without blocking
    assert time.monotonic() - started < 5
    assert read_kernel_oom_kills(str(tmp_path / "none")).readable is False
    # While the trainer runs, nothing is claimed about it.
    gatherer = EvidenceGatherer(tmp_path)
    assert gatherer.gather(TrainerStatus(pid=os.getpid(), alive=True)).oom_killed is None


# --- a load error on the resume checkpoint -----------------------------------------------------
LOAD = """
import sys, torch
state = torch.load(sys.argv[1], weights_only=False)
model = torch.nn.Sequential(torch.nn.Linear(64, int(sys.argv[2])), torch.nn.LayerNorm(int(sys.argv[2])))
model.load_state_dict(state["model"])
"""


def _trainer_loading(pth: Path, width: int, log: Path, gatherer: EvidenceGatherer) -> TrainerStatus:
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", LOAD, str(pth), str(width)], stdout=out, stderr=subprocess.STDOUT)
        gatherer.launched(proc.pid, pth)
        code = proc.wait(timeout=120)
    return TrainerStatus(pid=proc.pid, alive=False, exit_code=code)


@pytest.mark.slow   # two real processes importing torch to load a checkpoint
def test_a_load_error_is_corrupt_checkpoint_only_when_the_resumed_file_verifies_corrupt(tmp_path):
    out_dir, run_dir = tmp_path / "out", tmp_path / "run"
    make_ckpt(out_dir, 20)
    make_ckpt(out_dir, 40)
    catalog = CheckpointCatalog(out_dir, RunFolder(run_dir), run_dir / "quarantine", LitGPTAdapter())
    assert catalog.refresh() == [] and catalog.verified == {20, 40}   # sealed while whole
    damaged = out_dir / "step-00000040" / "lit_model.pth"
    os.truncate(damaged, damaged.stat().st_size // 2)              # then cut short on disk
    gatherer = EvidenceGatherer(out_dir, run_dir, catalog.resume_file_corrupt)

    # The truncated file: torch's own reader error, and verification finds it corrupt.
    trainer = _trainer_loading(damaged, 64, tmp_path / "corrupt.log", gatherer)
    tail = (tmp_path / "corrupt.log").read_text().splitlines()
    assert trainer.exit_code == 1 and any("Error" in line for line in tail), tail
    evidence = gatherer.gather(trainer, catalog.status())
    assert evidence.resume_checkpoint_corrupt is True and "step-00000040" in evidence.resume_checkpoint_problem
    assert evidence.resume_checkpoint == str(damaged)
    assert decided(StateSnapshot(trainer=trainer, tail=tail, evidence=evidence)) == "corrupt-checkpoint"
    # Whatever the reader's words, a corrupt resume file decides it.
    other = tail[:-1] + ["RuntimeError: invalid header or archive is corrupted (while loading the checkpoint)"]
    assert decided(StateSnapshot(trainer=trainer, tail=other, evidence=evidence)) == "corrupt-checkpoint"

    # The intact file loaded into a model of another shape: a load error, but not the file's fault.
    intact = out_dir / "step-00000020" / "lit_model.pth"
    trainer = _trainer_loading(intact, 32, tmp_path / "shape.log", gatherer)
    tail = (tmp_path / "shape.log").read_text().splitlines()
    assert trainer.exit_code == 1 and any("size mismatch" in line for line in tail), tail
    evidence = gatherer.gather(trainer, catalog.status())
    assert evidence.resume_checkpoint_corrupt is False and evidence.resume_checkpoint_problem is None
    assert decided(StateSnapshot(trainer=trainer, tail=tail, evidence=evidence)) == "unknown-crash"
    # Even a reader's error is not the file's when the file verifies intact (it changed under the reader, a flaky
    # disk): a human looks (unknown-crash escalates), rather than quarantining a good checkpoint.
    reader = ["RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"]
    assert decided(StateSnapshot(trainer=trainer, tail=reader, evidence=evidence)) == "unknown-crash"


def test_explain_shows_the_evidence(tmp_path):
    snapshot = StateSnapshot(trainer=TrainerStatus(alive=False, exit_code=-9, signal="SIGKILL"),
                             evidence={"oom_killed": True, "oom_detail": "oom_kill 0 -> 1 in /sys/fs/cgroup/t/memory.events",
                                       "out_dir_free_bytes": 5_000_000, "disk_nearly_full": False})
    state = tmp_path / "state.json"
    state.write_text(snapshot.model_dump_json())
    for name, code in (("oom", 0), ("killed", 1)):
        result = CliRunner().invoke(app, ["playbooks", "explain", name, "--state", str(state),
                                          "--playbooks", str(REPO / "playbooks")])
        assert result.exit_code == code, result.output
        assert ("evidence: out_dir free 5.0 MB; run_dir free unknown; disk_nearly_full false; oom_killed true "
                "(oom_kill 0 -> 1 in /sys/fs/cgroup/t/memory.events)") in result.output, result.output
        assert "state.evidence.oom_killed is true" in result.output
