"""One scenario suite for every trainer (issue 36): trainer x fault, each a real `runbook watch` of a
tiny model broken from outside, asserting the incident, its outcome, the steps lost and, for a
preemption, weight parity with an undisturbed run of the same trainer.

    toy         tests/toy_trainer/ (pure Python; its OOM is its own printed MemoryError)
    hf-trainer  examples/hf_trainer/train.py: transformers.Trainer + runbook.hf_callback.RunbookCallback
    script      examples/script/train.py: a nanoGPT-style loop + runbook/sdk.py

The faults: SIGTERM after the second checkpoint (preemption), a real allocation failure under
trainer.memory_limit_mb (the scripts' RUNBOOK_EXAMPLE_ACTIVATION_MB reserves memory per micro-batch
sample: it fails only where memory is really short), lr 10 (the loss diverges to NaN), a truncated and
a flipped checkpoint + SIGKILL, a tmpfs out_dir too small for every checkpoint (root), SIGSTOP (hang).
Every row's figures go to the terminal summary (record_evidence): docs/trainers.md's matrix is them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from engine.trainers import adapter_for
from engine.trainers.run_config import load_config
from engine.watch.faults import FAULTS, DrillRun
from tests.conftest import assert_recovered_in_the_end, REPO, record_evidence, require_capability, stop_process, wait_for
from tests.trainers.projects import MICRO, TRAINERS, make_project

pytestmark = pytest.mark.slow
NAMES = list(TRAINERS)
# One xdist group per trainer, not one for the file: the three trainers' rows (HF's and the script's take
# minutes each) then spread over the workers, and a worker builds only its own trainers' references.
BY_TRAINER = [pytest.param(name, marks=pytest.mark.xdist_group(f"scenarios-{name}")) for name in NAMES]
WATCH_TIMEOUT = 240.0
ACTIVATION_MB, MEMORY_LIMIT_MB, OOM_FROM_STEP = 1024, 3500, 7   # measured VmPeak: script 0.68 GB, HF 0.90 GB; micro-batch 4 needs +4 GiB, 2 needs +2
# Each checkpoint (with runbook's manifest): HF 1.5 MB, script 1.7 MB, toy 3 pages; all of a run's need ~2x the tmpfs.
# Retention is off in the disk test, so once the disk is full every later save fails again: the script's 8m holds
# four of its checkpoints, so it fills late and two or three incidents end the run (6m: up to 5 > max_attempts 4).
TMPFS = {"hf-trainer": "6m", "script": "8m", "toy": "48k"}


def run(project, trainer, fault: str | None = None, timeout: float = WATCH_TIMEOUT, env: dict | None = None):
    started = time.monotonic()
    watcher = project.watch(env={"PYTHONPATH": str(REPO), **(env or {})})
    try:
        if fault is not None:
            drill = DrillRun(project.out_dir, project.run_dir, watcher, adapter_for(trainer.kind), timeout)
            (INJECTORS.get(fault) or FAULTS[fault].inject)(drill)
        code = watcher.wait(timeout=timeout)
    finally:
        stop_process(watcher)
    return code, time.monotonic() - started


INJECTORS = {}   # faults injected here rather than by engine/watch/faults.py (filled in below)


def tensors_equal(reference, got, trainer) -> bool:
    """Parity of the weights: byte-identical files, or (torch.save embeds no timestamps but HF's
    safetensors metadata may differ) the same tensors bit for bit."""
    a, b = reference.out_dir / "final" / trainer.final_file, got.out_dir / "final" / trainer.final_file
    if a.read_bytes() == b.read_bytes():
        return True
    from engine.trainers.script.weights import tensors_of

    ta, tb = dict(tensors_of(a, "model")), dict(tensors_of(b, "model"))   # tensors_of yields (name, tensor)
    return ta.keys() == tb.keys() and all(bool((ta[k] == tb[k]).all()) for k in ta)


def row(trainer, fault: str, project, seconds: float, parity: str = "-") -> list[dict]:
    incidents = project.incidents()
    for i in incidents:
        record_evidence(f"scenario {trainer.name} x {fault}: incident {i['playbook']} -> {i['outcome']}, "
                        f"exit {i.get('trainer_exit_code')}, failed at step {i.get('step_at_failure')}, resumed "
                        f"{i.get('resumed_step')}, steps lost {i.get('steps_lost')}, weights parity {parity}, {seconds:.0f} s")
    return incidents


def corrupt_sealed_then_kill(drill: DrillRun) -> None:
    """engine/watch/faults.py's corrupt-checkpoint, once runbook has sealed the checkpoint before the newest:
    a byte flipped inside a safetensors tensor is visible only to the seal's sha256 (the format has no
    checksum), and an HF Trainer saves faster than a loaded 2-core machine's watcher seals (measured: the
    drill's flip landed before the seal, which then recorded the flipped bytes)."""
    drill.wait_for_checkpoint(3)
    pid = drill.trainer_pid()
    os.kill(pid, signal.SIGSTOP)   # no further save; the watcher seals what is there meanwhile
    # the stop may land mid-save: a newest folder without its resume file yet is not one of the two to damage
    *_, older, newest = [f for f in drill.checkpoint_folders() if drill.save_complete(f)]
    wait_for(lambda: (older / "runbook-manifest.json").is_file(), timeout=60, what=f"{older.name} sealed")
    resume_file = drill.layout.resume_file(newest)
    with open(resume_file, "r+b") as fh:
        fh.truncate(resume_file.stat().st_size // 2)
    target = drill.layout.resume_file(older)
    with open(target, "r+b") as fh:
        fh.seek(target.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.kill(pid, signal.SIGKILL)


INJECTORS["corrupt-checkpoint"] = corrupt_sealed_then_kill


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """One undisturbed run per trainer, made when first asked for (on the worker that runs that trainer's group)."""
    made = {}

    def get(name: str):
        if name not in made:
            trainer = TRAINERS[name]
            project = make_project(tmp_path_factory.mktemp(f"reference-{name}") / "project", trainer)
            code, seconds = run(project, trainer)
            assert code == 0, project.watch_output()
            assert project.incidents() == []
            record_evidence(f"scenario {name} x none: completed in {seconds:.0f} s, no incident")
            made[name] = project
        return made[name]

    return get


@pytest.mark.parametrize("name", BY_TRAINER)
def test_preemption_resumes_with_the_undisturbed_weights(tmp_path, name, references):
    trainer = TRAINERS[name]
    reference = references(name)
    project = make_project(tmp_path / "project", trainer)
    code, seconds = run(project, trainer, "preemption")   # SIGTERM to the trainer after its second checkpoint
    assert code == 0, project.watch_output()
    parity = tensors_equal(reference, project, trainer)
    [incident] = row(trainer, "preemption", project, seconds, "yes" if parity else "NO")
    assert incident["playbook"] == "preemption" and incident["outcome"] == "recovered", incident
    # the toy's notice save, the HF callback and the sdk saved the step in progress and exited 75: nothing lost
    assert incident["trainer_exit_code"] == 75, incident
    assert incident["steps_lost"] == 0, incident
    assert parity, f"{name}: the recovered run's final weights differ from the undisturbed run's"


@pytest.mark.parametrize("name", BY_TRAINER)
def test_oom_halves_the_micro_batch_and_keeps_the_effective_batch(tmp_path, name):
    trainer = TRAINERS[name]
    project = make_project(tmp_path / "project", trainer)
    env = {}
    if name == "toy":
        project.set(trainer={"extra": {"step_seconds": 0.03, "oom_above_micro_batch": MICRO // 2}})
    else:   # a real allocation failure: the address-space limit is the machine's memory, the script only allocates
        project.set(trainer={"memory_limit_mb": MEMORY_LIMIT_MB, "env": {
            "OMP_NUM_THREADS": "1", "RUNBOOK_EXAMPLE_ACTIVATION_MB": str(ACTIVATION_MB),
            "RUNBOOK_EXAMPLE_ACTIVATION_FROM_STEP": str(OOM_FROM_STEP)}})
    code, seconds = run(project, trainer, env=env)
    assert code == 0, project.watch_output()
    incidents = row(trainer, "oom", project, seconds)
    assert [i["playbook"] for i in incidents] == ["oom"], incidents
    assert incidents[0]["outcome"] == "recovered"
    if name != "toy":   # it failed in step 7 and resumed from checkpoint 4 with the halved micro-batch
        assert (incidents[0]["resumed_step"], incidents[0]["steps_lost"]) == (4, 2), incidents[0]
    logs = "\n".join(p.read_text(errors="replace") for p in sorted((project.run_dir / "logs").glob("trainer-*.log")))
    if name != "toy":
        assert "DefaultCPUAllocator: can't allocate memory" in logs   # the allocator's own words, not a printed fake
    launches = sorted((project.run_dir / "launches").rglob("launch.json"))
    if name != "toy":
        last = json.loads(launches[-1].read_text())
        assert last["hyperparameters"]["micro_batch_size"] == MICRO // 2 and last["hyperparameters"]["batch_size"] == 8
    if name == "hf-trainer":
        argv = json.loads(launches[-1].read_text())["argv"]
        assert argv[argv.index("--per_device_train_batch_size") + 1] == str(MICRO // 2)
        assert argv[argv.index("--gradient_accumulation_steps") + 1] == "4"   # 8 / 2: the same effective batch
    assert (project.out_dir / "final" / trainer.final_file).is_file()


@pytest.mark.parametrize("name", BY_TRAINER)
def test_a_diverging_lr_is_rolled_back_and_lowered(tmp_path, name):
    trainer = TRAINERS[name]
    project = make_project(tmp_path / "project", trainer, lr=10.0)
    code, seconds = run(project, trainer)
    assert code == 0, project.watch_output()
    incidents = row(trainer, "nan", project, seconds)
    assert incidents and {i["playbook"] for i in incidents} <= {"nan", "loss-spike"}, incidents
    assert_recovered_in_the_end(incidents)
    first = incidents[0]
    assert first["resumed_step"] is None or first["resumed_step"] < first["step_at_failure"]   # rolled back
    lr_after = load_config(project.config).config.lr
    assert lr_after < 10.0   # written back by set_hyperparameters
    if name == "hf-trainer":   # a resumed optimizer + scheduler bring their saved lr; the callback's override wins
        last_log = sorted((project.run_dir / "logs").glob("trainer-*.log"))[-1].read_text(errors="replace")
        first_lr = float(re.search(r"'learning_rate': '([^']+)'", last_log).group(1))
        assert first_lr <= lr_after * 1.0001, (first_lr, lr_after, incidents[-1].get("resumed_step"))
    assert (project.out_dir / "final" / trainer.final_file).is_file()


@pytest.mark.parametrize("name", BY_TRAINER)
def test_a_corrupt_checkpoint_is_quarantined_and_an_older_one_resumed(tmp_path, name):
    trainer = TRAINERS[name]
    project = make_project(tmp_path / "project", trainer)
    code, seconds = run(project, trainer, "corrupt-checkpoint")   # truncate the newest, flip a byte in the sealed one before, SIGKILL
    assert code == 0, project.watch_output()
    incidents = row(trainer, "corrupt-checkpoint", project, seconds)
    assert_recovered_in_the_end(incidents)
    assert {i["playbook"] for i in incidents} <= {"corrupt-checkpoint", "killed"}
    layout = adapter_for(trainer.kind).layout
    quarantined = sorted(layout.step_of(p.name.rsplit("-", 1)[0]) for p in (project.run_dir / "quarantine").iterdir())
    assert len(quarantined) >= 2 and None not in quarantined, quarantined   # the truncated newest and the flipped one
    resumed = [i["resumed_step"] for i in incidents if i.get("resumed_step") is not None]
    assert resumed and max(resumed) < min(quarantined), (resumed, quarantined)   # fell back past both
    assert (project.out_dir / "final" / trainer.final_file).is_file()


@pytest.mark.parametrize("name", BY_TRAINER)
def test_a_full_disk_is_recovered_by_pruning_only_what_runbook_announced(tmp_path, name):
    if os.geteuid() != 0:
        require_capability("mounting a tmpfs needs root")
    trainer = TRAINERS[name]
    project = make_project(tmp_path / "project", trainer, keep_last_k=2, upkeep={"retention_interval_s": None})
    project.out_dir.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS[name]}", "tmpfs", str(project.out_dir)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        require_capability(f"mount refused: {mounted.stderr.strip()}")
    try:
        (project.out_dir / "notes-of-the-user.txt").write_text("mine\n")   # runbook deletes only what it wrote
        code, seconds = run(project, trainer)
        assert code == 0, project.watch_output()
        incidents = row(trainer, "disk-full", project, seconds)
        assert incidents and {i["playbook"] for i in incidents} <= {"disk-full", "disk-low"}, incidents
        assert_recovered_in_the_end(incidents)
        assert (project.out_dir / "notes-of-the-user.txt").read_text() == "mine\n"
        assert (project.out_dir / "final" / trainer.final_file).is_file()
    finally:
        subprocess.run(["umount", "-l", str(project.out_dir)])


@pytest.mark.parametrize("name", BY_TRAINER)
def test_a_stopped_trainer_is_a_hang_and_is_relaunched(tmp_path, name):
    trainer = TRAINERS[name]
    project = make_project(tmp_path / "project", trainer, watch={"hang_floor_s": 5.0, "hang_timeout_s": 20})
    code, seconds = run(project, trainer, "hang")   # SIGSTOP after the first checkpoint
    assert code == 0, project.watch_output()
    incidents = row(trainer, "hang", project, seconds)
    assert [i["playbook"] for i in incidents] == ["hang"], incidents
    assert incidents[0]["outcome"] == "recovered"
    assert (project.out_dir / "final" / trainer.final_file).is_file()
