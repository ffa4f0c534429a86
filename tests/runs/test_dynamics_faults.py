"""Training-dynamics failures on real toy-trainer runs: a NaN, a loss spike, slow training. The figures each
test expects come from the toy's own math (tests/toy_trainer/trainer.py: every weight's error is multiplied
by 1 - lr each step, plus a 1e-3 wobble), replayed for the recovery the incident records, never from a
trajectory seen once. Corrupt lines in the training text, which only litgpt's tokenization reads, are in
tests/litgpt/test_litgpt_faults.py."""

from __future__ import annotations

import math
import os
import re
import signal
import threading
import time

import pytest

from engine.checkpoints.store import list_checkpoints
from engine.trainers.run_config import load_config
from tests.conftest import REPO, TOY_STEPS, run_watch, stop_process, wait_for
from tests.toy_trainer import trainer as toy
from tests.toy_trainer.adapter import ToyAdapter

# The dynamics tests must hold for any trajectory of the fault, not one machine's: run them with other
# seeds as `RUNBOOK_TEST_SEED=2 pytest tests/runs/test_dynamics_faults.py`.
SEED = int(os.environ.get("RUNBOOK_TEST_SEED", "1337"))


def replay(seed: int, *phases: tuple[int, float], max_weight: float = math.inf) -> tuple[dict, float]:
    """The toy's state and last loss after `steps` steps at `lr` for each (steps, lr) phase, from its start:
    what a run that resumed bit-identically between the phases ends with."""
    state, loss = toy.initial_state(seed), math.nan
    for steps, lr in phases:
        for _ in range(steps):
            loss = toy.train_step(state, lr, max_weight)
    return state, loss


def toy_extra(project, **extra) -> None:
    """Set the toy's trainer.extra options (the section is replaced as a whole: notice_save is kept on)."""
    project.set(trainer={"extra": {"step_seconds": 0.03, "notice_save": True, **extra}})


def undisturbed_final_loss(project, reference_run) -> float:
    """The final loss of an undisturbed run of `project`'s seed at the shipped lr, by the toy's math; the
    replay is first checked against the real undisturbed run (the reference)."""
    reference = load_config(reference_run["project"].config).config
    state, _loss = replay(reference.seed, (TOY_STEPS, reference.lr))
    assert state == reference_run["project"].final_state(), "the replay is not the toy's math"
    return replay(load_config(project.config).config.seed, (TOY_STEPS, reference.lr))[1]


def without_loss_spike(text: str) -> str:
    """A playbook's text with loss-spike taken out of its `inhibits:` list (that playbook is left out)."""
    return re.sub(r"^(inhibits: \[.*)$", lambda m: re.sub(r",?\s*loss-spike", "", m.group(1)).replace("[, ", "["),
                  text, flags=re.M)


# lr 3.5: every weight's error is multiplied by -2.5 a step, so from any start the weights pass 65504 (the
# largest half-precision value, the toy's max_weight) within about a dozen steps of 40: inf, then nan. Half of
# it, 1.75 (x -0.75 a step), converges. The loss climbs from step 1 (x 6.25 a step): steps 1 and 2 are healthy
# only because the spike baseline (the best median of 3 losses) does not exist before step 3.
NAN_LR, MAX_WEIGHT = 3.5, 65504.0


def test_nan_rolls_back_halves_lr_and_the_run_completes_finite(project, tmp_path):
    # The loss climbs before it goes non-finite (the loss-spike playbook would catch that first): without
    # loss-spike the NaN path is what is exercised.
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    for source in (REPO / "playbooks").glob("*.yaml"):
        if source.name != "loss_spike.yaml":
            (playbooks / source.name).write_text(without_loss_spike(source.read_text()))
    # A checkpoint every step: the rollback then has clean checkpoints from before the divergence to choose
    # among (at save_interval 5 the only one before it is the start, target 0, and the checks below have
    # nothing to check). 0.1 s a step: the watcher stops the run long before its end.
    toy_extra(project, step_seconds=0.1, max_weight=MAX_WEIGHT)
    project.set(lr=NAN_LR, seed=SEED, save_interval=1, playbooks={"paths": [str(playbooks)], "shipped": False})
    run_watch(project)

    incidents = project.incidents()
    assert incidents and incidents[0]["playbook"] == "nan", [i["playbook"] for i in incidents]
    # Each NaN rolled back to before the divergence: to the checkpoint the last healthy loss (step h)
    # vouches for, h - 1 on the first attempt, never to one at/after h, and resumed from exactly there.
    nans = [i for i in incidents if i["playbook"] == "nan"]
    first = nans[0]
    healthy = first["snapshot"]["metrics"]["last_healthy_step"]
    assert healthy is not None and 0 < first["rollback_target_step"] == healthy - 1 < first["step_at_failure"], first
    assert first["resumed_step"] == first["rollback_target_step"], first
    for nan in nans:
        assert nan["rollback_target_step"] < nan["snapshot"]["metrics"]["last_healthy_step"], nan
    assert first["config_changes"]["lr"] == [NAN_LR, NAN_LR / 2]
    text = project.config.read_text()
    lr = float(re.search(r"^lr: (\S+)", text, re.M).group(1))
    assert lr == NAN_LR / 2   # 1.75 converges: one NaN, one halving
    assert "# peak learning rate (cosine schedule with warm-up)" in text  # comments kept
    # The run resumed from the rollback's checkpoint at the halved lr and trained to a finite end: exactly
    # the toy's math for that recovery.
    final = project.final_state()
    assert all(math.isfinite(w) for w in final["weights"]), final
    expected, _loss = replay(SEED, (first["resumed_step"], NAN_LR), (TOY_STEPS - first["resumed_step"], lr), max_weight=MAX_WEIGHT)
    assert final == expected
    # Quarantined checkpoints are out of the resume path, and nothing left there holds NaN/Inf.
    adapter = ToyAdapter()
    for ckpt in list_checkpoints(project.out_dir, adapter.layout):
        assert adapter.find_nonfinite(ckpt, 10) == [], ckpt.path
    quarantine = project.run_dir / "quarantine"
    assert not list(project.out_dir.rglob("QUARANTINE_REASON.txt"))
    assert quarantine.exists() and any(quarantine.iterdir()), "the rollback quarantined nothing"


# lr 3: every weight's error is multiplied by -2 a step, the loss by 4: it climbs from step 1 and stays finite
# for the whole run (4^40 x the start). A quarter of it, 0.75 (x -0.25 a step), converges; the toy's loss is
# then at its floor (the 1e-3 wobble) within a dozen steps.
SPIKE_LR = 3.0


def test_loss_spike_rolls_back_lowers_lr_and_ends_as_trained_as_the_normal_run(project, reference_run):
    # A checkpoint every step gives the rollback a clean checkpoint from before the spike. 0.1 s a step:
    # the watcher stops the run long before its end.
    toy_extra(project, step_seconds=0.1)
    project.set(lr=SPIKE_LR, save_interval=1, seed=SEED)
    run_watch(project)

    spikes = [i for i in project.incidents() if i["playbook"] == "loss-spike"]
    assert spikes, [i["playbook"] for i in project.incidents()]
    first = spikes[0]
    assert first["config_changes"]["lr"] == [SPIKE_LR, SPIKE_LR / 4]
    assert len(spikes) == 1, spikes   # at lr 0.75 the loss only falls: nothing to come back
    assert any("loss last healthy at step" in n for n in first["notes"])
    # Rolled back to a checkpoint saved before the spike, not merely to the newest one: the last
    # healthy loss (step h) is that of checkpoint h - 1.
    assert 0 < first["resumed_step"] == first["rollback_target_step"] < first["step_at_failure"]
    assert first["resumed_step"] == first["snapshot"]["metrics"]["last_healthy_step"] - 1
    assert (project.run_dir / "quarantine").exists()
    # It ends exactly where the toy's math puts that recovery (the resumed checkpoint's steps at lr 3, the
    # rest at the lowered lr), and at least as well trained as an undisturbed run at the shipped lr.
    expected, loss = replay(SEED, (first["resumed_step"], SPIKE_LR), (TOY_STEPS - first["resumed_step"], SPIKE_LR / 4))
    assert project.final_state() == expected
    assert loss <= undisturbed_final_loss(project, reference_run), (loss, undisturbed_final_loss(project, reference_run))


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_throttled_trainer_opens_a_slow_training_incident_with_a_diagnosis_and_closes_it(project, tmp_path):
    # The test's copy of the playbooks is tuned for a shared 2-core machine whose other jobs may slow the
    # run before, during or after the throttle (a full-suite run does): no cooldown and more attempts, so
    # such slowness neither holds back nor escalates in place of the throttle's own incident; a 2 s pause
    # after the diagnosis, in which the test ends the throttle, so the wait_for only ever judges the run
    # unthrottled; and recovery at 50% of the baseline, not 80%: between the throttled speed (25%) and a
    # loaded but unthrottled one.
    slow = (REPO / "playbooks" / "slow_training.yaml").read_text()
    tuned = (slow.replace("  max_attempts: 3\n", "  max_attempts: 100\n")
             .replace("      sample_seconds: 2\n", "      sample_seconds: 2\n  - wait: {seconds: 2}\n")
             .replace(">= 0.8 * state.metrics.baseline_tokens_per_sec", ">= 0.5 * state.metrics.baseline_tokens_per_sec"))
    assert tuned.count("wait: {seconds: 2}") == 1 and "0.5 * state" in tuned and "max_attempts: 100" in tuned, tuned
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    for source in (REPO / "playbooks").glob("*.yaml"):
        (playbooks / source.name).write_text(source.read_text().replace("  cooldown: 2m\n", "  cooldown: 0s\n"))
    (playbooks / "slow_training.yaml").write_text(tuned.replace("  cooldown: 2m\n", "  cooldown: 0s\n"))
    # 400 steps of 0.05 s (the step's own time, which the toy reports, is what the throttle stretches): 20 s
    # unthrottled, and at the throttle's 25% it would take 80 s more, so the run outlasts the incident.
    toy_extra(project, step_seconds=0.05)
    project.set(max_tokens=400 * 16 * 64, save_interval=100, playbooks={"paths": [str(playbooks)]})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        # Wait until the run has a throughput baseline (30 iterations after start), then throttle it.
        wait_for(lambda: _progress_lines(project) >= 60, 120, what="baseline")
        pid = project.trainer_pid()
        stop_throttle = threading.Event()

        def duty_cycle():  # 75% stopped: a noisy neighbour or a cgroup freezer, from outside
            while not stop_throttle.is_set():
                os.kill(pid, signal.SIGSTOP)
                time.sleep(0.15)
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.05)

        throttle = threading.Thread(target=duty_cycle, daemon=True)
        throttled_at = time.time()
        throttle.start()

        def throttled_incidents():
            return [i for i in project.incidents(include_slow=True)
                    if i["playbook"] == "slow-training" and i["detected_at"] >= throttled_at]

        def diagnosed():  # the diagnosis sampled the throttled process
            return any(a["verb"] == "diagnose_slowness" for i in throttled_incidents()[:1] for a in i["actions"])

        try:
            wait_for(lambda: throttled_incidents(), 120, what="slow incident")
            wait_for(diagnosed, 60, what=f"the diagnosis of {throttled_incidents()[0]['id']}")
        finally:
            stop_throttle.set()
            throttle.join()
            os.kill(pid, signal.SIGCONT)
            unthrottled_at = time.time()
        assert watcher.wait(timeout=300) == 0, project.watch_output()
    finally:
        stop_process(watcher)

    slow = throttled_incidents()[0]
    assert slow["outcome"] == "recovered"
    assert throttled_at <= slow["detected_at"] <= unthrottled_at, (throttled_at, slow["detected_at"], unthrottled_at)
    assert "stopped from outside" in slow["diagnosis"]["verdict"], slow["diagnosis"]
    assert slow["diagnosis"]["samples"]["stopped_fraction"] >= 0.1
    wait_step = next(a for a in slow["actions"] if a["verb"] == "wait_for")
    assert wait_step["ok"], (wait_step, project.watch_output())
    # It judged the run only after the throttle had ended, and found it recovered.
    assert slow["closed_at"] - wait_step["seconds"] >= unthrottled_at, (slow["closed_at"], wait_step, unthrottled_at)


def _progress_lines(project) -> int:
    logs = sorted((project.run_dir / "logs").glob("trainer-*.log")) if (project.run_dir / "logs").exists() else []
    return sum(1 for log in logs for line in log.read_text(errors="replace").splitlines() if line.startswith("toy step "))
