"""What the observer remembers across a relaunch: the run's measures stay, the old process's go.

Fed with real litgpt log lines through the real adapter; the spike check uses the shipped
loss-spike playbook through the real matcher.
"""

from __future__ import annotations

from engine.observe.throughput import ProgressMeaning
from engine.language.matcher import AttemptHistory, MatchMemory, decide
from engine.observe.observer import MetricTracker
from engine.language.loader import load_playbook_file
from engine.language.playbook_testing import build_config
from engine.core.state import StateSnapshot, TrainerStatus
from engine.trainers.litgpt.adapter import LitGPTAdapter
from tests.conftest import REPO

ADAPTER = LitGPTAdapter()


def progress(step: int, loss: float) -> str:
    return (f"Epoch 1 | iter {4 * step} step {step} | loss train: {loss:.3f}, val: n/a | "
            f"iter time: 11.00 ms (step) remaining time: 0:00:05")


def feed(tracker: MetricTracker, lines: list[tuple[float, str]]) -> None:
    for now, line in lines:
        event = ADAPTER.parse_line(line)
        assert event is not None, line
        tracker.on_event(event, now)


def spike_fires(tracker: MetricTracker) -> bool:
    playbook = load_playbook_file(REPO / "playbooks" / "loss_spike.yaml")
    snapshot = StateSnapshot(trainer=TrainerStatus(alive=True), metrics=tracker.metrics())
    outcome = decide(snapshot, build_config({}), [playbook], MatchMemory(), AttemptHistory())
    return outcome.decision is not None and outcome.decision.playbook.name == "loss-spike"


def test_the_longest_progress_gap_survives_a_relaunch():
    tracker = MetricTracker(ProgressMeaning(256))
    feed(tracker, [(0.0, progress(1, 6.4)), (0.1, progress(2, 6.3)),
                   (0.2, "Saving checkpoint to '/x/step-00000002/lit_model.pth'"), (8.2, progress(3, 6.2))])
    assert abs(tracker.longest_gap_s - 8.1) < 1e-9
    tracker.new_launch(ProgressMeaning(256))
    feed(tracker, [(100.0, progress(3, 6.2)), (100.1, progress(4, 6.1))])
    # The relaunch's save-free gaps (0.1 s) must not shrink the hang timeout below the save time.
    assert abs(tracker.longest_gap_s - 8.1) < 1e-9


def test_the_spike_baseline_survives_a_rollback_and_a_diverged_resume_still_fires():
    tracker = MetricTracker(ProgressMeaning(256))
    healthy = [6.4, 6.3, 6.2, 6.1]
    spike = [13.0, 25.0, 32.0, 34.0]
    feed(tracker, [(i, progress(i + 1, loss)) for i, loss in enumerate(healthy + spike)])
    assert tracker.best_median == 6.2 and tracker.last_healthy_step == 4
    assert spike_fires(tracker)

    # Rolled back to a checkpoint saved mid-divergence (step 6): a NaN rollback can only reach the
    # newest finite checkpoint. The stale spike lines must not fire again before anything new is seen...
    tracker.new_launch(ProgressMeaning(256))
    assert tracker.metrics().loss_history == [] and not spike_fires(tracker)
    # ...and the diverged level must still count as a spike against the healthy baseline.
    feed(tracker, [(50 + i, progress(7 + i, 30.0)) for i in range(4)])
    assert tracker.best_median == 6.2
    assert tracker.last_healthy_step == 4, "a resume from inside the spike is not healthy"
    assert spike_fires(tracker)


def test_a_resume_before_the_last_healthy_step_moves_it_back():
    tracker = MetricTracker(ProgressMeaning(256))
    feed(tracker, [(i, progress(i + 1, 6.0)) for i in range(10)])
    assert tracker.last_healthy_step == 10
    tracker.new_launch(ProgressMeaning(256))
    feed(tracker, [(20.0, progress(5, 20.0))])  # resumed from step 4, and the first step is bad
    assert tracker.last_healthy_step == 4
    feed(tracker, [(21.0, progress(6, 6.0))])
    assert tracker.last_healthy_step == 6


def test_a_relaunch_gets_the_ceiling_until_its_first_progress_line_then_the_learnt_timeout():
    from engine.core.config import WatchSettings
    from engine.observe.observer import Observer

    watch = WatchSettings(hang_timeout_s=60, hang_floor_s=5, hang_safety_factor=5)
    observer = Observer(ADAPTER, REPO, ProgressMeaning(256))
    feed(observer.tracker, [(0.0, progress(1, 6.4)), (0.5, progress(2, 6.3))])
    assert observer.hang_timeout(watch) == 5.0          # 5 x 0.5 s, raised to the floor
    observer.tracker.new_launch(ProgressMeaning(256))
    assert observer.hang_timeout(watch) == 60.0         # start-up: imports, data, resume
    feed(observer.tracker, [(30.0, progress(3, 6.2))])
    assert observer.hang_timeout(watch) == 5.0


def test_each_repeated_spike_cuts_the_lr_four_times_harder():
    """lr 10 (the chaos benchmark's divergence) reaches a sane lr in three incidents: / 4, / 16, / 64."""
    from engine.language.planner import plan
    from engine.core.config import RunConfig

    playbook = load_playbook_file(REPO / "playbooks" / "loss_spike.yaml")
    snapshot = StateSnapshot(trainer=TrainerStatus(alive=True), metrics={"step": 7, "loss": 30.0,
                                                                          "loss_best_median": 6.4, "last_healthy_step": 3})
    lr, seen = 10.0, []
    for attempt in (1, 2, 3):   # litgpt (the default kind) cannot skip data: no skip rung
        steps = plan(playbook, snapshot, RunConfig.model_validate({"lr": lr}), attempt)
        [change] = [s for s in steps if s.verb == "set_hyperparameters" and s.skipped is None]
        assert change.error is None and not [s for s in steps if s.verb == "skip_data" and s.skipped is None]
        lr = change.params.lr
        seen.append(lr)
    assert seen == [2.5, 2.5 / 16, 2.5 / 16 / 64]


def test_a_spike_that_comes_back_after_the_cut_skips_its_data_at_the_old_lr_where_the_trainer_can_skip():
    """The ladder (issue 48): rung 1 cuts the lr; rung 2 skips the data window and puts the lr back; then / 4 ** n."""
    from engine.language.planner import plan
    from engine.core.config import RunConfig

    playbook = load_playbook_file(REPO / "playbooks" / "loss_spike.yaml")

    def rungs(previous_bad_step: int | None, kind: str = "script", healthy: int = 13) -> list[tuple[float, int]]:
        snapshot = StateSnapshot(trainer=TrainerStatus(alive=True), metrics={
            "step": 17, "loss": 30.0, "loss_best_median": 6.4, "last_healthy_step": healthy,
            "previous_bad_step": previous_bad_step})
        lr, taken = 10.0, []
        for attempt in (1, 2, 3):
            config = RunConfig.model_validate({"lr": lr, "save_interval": 5, "trainer": {"kind": kind}})
            steps = plan(playbook, snapshot, config, attempt)
            [change] = [s for s in steps if s.verb == "set_hyperparameters" and s.skipped is None]
            lr = change.params.lr
            taken.append((lr, len([s for s in steps if s.verb == "skip_data" and s.skipped is None])))
        return taken

    skipped, cut = [(2.5, 0), (10.0, 1), (10.0 / 64, 0)], [(2.5, 0), (2.5 / 16, 0), (2.5 / 16 / 64, 0)]
    assert rungs(previous_bad_step=13) == skipped                  # the same data: skip, the lr back
    assert rungs(previous_bad_step=18) == skipped                  # within a save interval
    assert rungs(previous_bad_step=19) == cut                      # elsewhere: the lr
    assert rungs(previous_bad_step=None) == cut
    assert rungs(previous_bad_step=3, healthy=3) == cut            # diverged at once, twice: the lr's, not data
    for kind in ("hf-trainer", "litgpt", "default"):   # every shipped kind skips (litgpt/data_skip.py, runbook/hf_data_skip.py)
        assert rungs(previous_bad_step=13, kind=kind) == skipped


def validation(iter_num: int, val_loss: float) -> str:
    return f"iter {iter_num}: val loss {val_loss:.4f}, val time: 12.00 ms"


def test_a_failed_validation_condemns_its_checkpoint_even_when_the_train_loss_looks_fine():
    """A collapsed model's train loss can sit near ln(vocab), inside 1.5 x the baseline; the val loss
    at step s judges the weights of checkpoint s directly."""
    tracker = MetricTracker(ProgressMeaning(256))
    feed(tracker, [(i, progress(i + 1, 6.0)) for i in range(10)])
    feed(tracker, [(10.0, validation(40, 5.0))])                  # step 10: healthy, the best val loss
    feed(tracker, [(10 + i, progress(11 + i, 6.2)) for i in range(10)])
    assert tracker.last_healthy_step == 20
    feed(tracker, [(21.0, validation(80, 40.0))])                 # step 20: 8 x the best
    assert tracker.last_healthy_step == 20                        # checkpoint 20 is bad: quarantine from 20
    feed(tracker, [(22.0, progress(21, 6.1)), (23.0, progress(22, 6.0))])
    assert tracker.last_healthy_step == 20, "train losses after a failed validation vouch for nothing more"
    tracker.new_launch(ProgressMeaning(256))                       # rolled back to checkpoint 19
    feed(tracker, [(30.0, progress(20, 6.0)), (31.0, progress(21, 6.0))])
    assert tracker.last_healthy_step == 21


def test_a_nan_rolls_back_to_before_the_divergence_and_a_repeat_goes_further_back():
    """The NaN playbook's rollback target comes from the run's loss history, not a count from the
    crash: diverged-but-finite checkpoints saved after the last healthy loss are all condemned."""
    from engine.language.planner import plan
    from engine.core.config import RunConfig

    playbook = load_playbook_file(REPO / "playbooks" / "nan.yaml")
    tracker = MetricTracker(ProgressMeaning(256))
    feed(tracker, [(i, progress(i + 1, 6.0)) for i in range(12)])
    feed(tracker, [(12 + i, progress(13 + i, loss)) for i, loss in enumerate([40.0, 446.0, 1027.0, 1101.0])])
    assert tracker.last_healthy_step == 12
    snapshot = StateSnapshot(trainer=TrainerStatus(alive=False, exit_code=1), metrics=tracker.metrics(),
                             tail=["RuntimeError: The total norm of order 2.0 for gradients from `parameters` "
                                   "is non-finite, so it cannot be clipped."])
    config = RunConfig.model_validate({"lr": 10.0, "save_interval": 5})
    targets, lrs = [], []
    for attempt in (1, 2, 3):
        steps = {s.verb: s for s in plan(playbook, snapshot, config, attempt)}
        rollback = steps["rollback"].params
        targets.append(int(rollback.bad_step) - rollback.steps)
        lrs.append(steps["set_hyperparameters"].params.lr)
        config = RunConfig.model_validate({"lr": lrs[-1], "save_interval": 5})
    # Checkpoints at/after 12 go on the first NaN (checkpoint 10 stays), then 5 and 10 steps further back.
    assert targets == [12, 7, 2]
    assert lrs == [5.0, 1.25, 1.25 / 8]


def test_a_huge_line_and_a_flood_are_read_in_bounded_memory_and_nothing_later_is_lost(tmp_path):
    import tracemalloc

    from engine.observe.observer import MAX_LINE_BYTES, MAX_READ_BYTES, LogTail

    log = tmp_path / "trainer.log"
    log.write_bytes(b"before\n" + b"x" * (40 * 1024 * 1024) + b"\n" + progress(3, 6.0).encode() + b"\n")
    tail = LogTail(log)
    tracemalloc.start()
    try:
        lines, reads = [], 0
        while tail.offset < log.stat().st_size:
            lines += tail.read()
            reads += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reads >= 40 * 1024 * 1024 // MAX_READ_BYTES            # the flood took several observations
    assert peak < 4 * MAX_READ_BYTES, peak                          # never the whole line in memory
    assert lines[0] == "before" and lines[2] == progress(3, 6.0)    # the line after it is read intact
    assert lines[1].startswith("x" * MAX_LINE_BYTES) and lines[1].endswith(f"[... {40 * 1024 * 1024 - MAX_LINE_BYTES} bytes cut]")

    with open(log, "ab") as fh:                                     # a line split across two reads
        fh.write(b"Traceback (most")
    assert tail.read() == []
    with open(log, "ab") as fh:
        fh.write(b" recent call last):\n")
    assert tail.read() == ["Traceback (most recent call last):"]


def test_start_up_is_judged_by_its_process_tree_working_and_a_stopped_tree_shows_no_life(tmp_path):
    """A child that computes and one that writes keep a start-up alive without a line of output;
    SIGSTOP on the whole tree leaves nothing advancing (engine/observe/activity.py)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from engine.observe.activity import StartupActivity, advanced, tree_counters

    busy = ("import subprocess, sys\n"
            "child = subprocess.Popen([sys.executable, '-c', 'while True: open(\"/dev/null\", \"w\").write(\"x\" * 4096)'])\n"
            "while True: sum(range(10000))\n")
    parent = subprocess.Popen([sys.executable, "-c", busy])
    try:
        deadline = time.monotonic() + 30                    # two interpreters start: slow on a loaded machine
        while len(tree_counters(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(tree_counters(parent.pid)) == 2          # the parent and its worker
        activity = StartupActivity(now=0.0)
        activity.sample(parent.pid, now=0.0)                # a baseline
        time.sleep(0.3)
        activity.sample(parent.pid, now=100.0)
        assert activity.seconds_idle(100.0) == 0.0          # CPU and I/O advanced: alive, no output needed

        tree = [psutil.Process(parent.pid), *psutil.Process(parent.pid).children(recursive=True)]
        for proc in tree:
            os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(0.3)                                     # let the stop land
        before = tree_counters(parent.pid)
        time.sleep(0.5)
        assert not advanced(before, tree_counters(parent.pid))
        activity.sample(parent.pid, now=101.0)              # the work done before the stop landed
        activity.sample(parent.pid, now=102.0)
        activity.sample(parent.pid, now=130.0)
        # stopped: no life since the stop landed. The last life is the sample at 100, 101 or 102 (the CPU window,
        # watch.cpu_life_window_s, may still hold what the tree used before the stop): all three seen on loaded CI
        assert 28.0 <= activity.seconds_idle(130.0) <= 30.0
        activity.output(now=131.0)                          # a line of output is life again
        assert activity.seconds_idle(131.5) == 0.5
    finally:
        for proc in psutil.Process(parent.pid).children(recursive=True):
            proc.kill()
        parent.kill()
        parent.wait()


def test_the_snapshot_says_start_up_until_the_first_progress_line_then_training(tmp_path):
    from engine.core.config import WatchSettings
    from engine.core.state import CheckpointStatus
    from engine.observe.observer import Observer

    log = tmp_path / "trainer.log"
    log.write_text("Seed set to 1337\n")
    observer = Observer(ADAPTER, tmp_path, ProgressMeaning(256))
    observer.follow(log, ProgressMeaning(256))
    watch = WatchSettings(hang_timeout_s=5, startup_timeout_s=600)
    now = observer.launched_at + 2
    trainer = TrainerStatus(alive=True, pid=None)
    snap = observer.snapshot(now, "running", trainer, CheckpointStatus(), observer.read_lines(now), watch)
    assert (snap.trainer.phase, snap.trainer.seconds_since_activity, snap.startup_timeout_s) == ("startup", 0.0, 600)
    snap = observer.snapshot(now + 7, "running", trainer, snap.checkpoints, observer.read_lines(now + 7), watch)
    assert snap.trainer.seconds_since_activity == 7.0   # no output and no process to sample since
    with open(log, "a") as fh:
        fh.write(progress(1, 5.0) + "\n")
    snap = observer.snapshot(now + 8, "running", trainer, snap.checkpoints, observer.read_lines(now + 8), watch)
    assert (snap.trainer.phase, snap.trainer.seconds_since_activity) == ("training", None)


def test_in_a_save_cpu_alone_is_no_sign_of_life_but_io_and_new_processes_are():
    """A collective deadlocked on a GPU spins its host thread: during a save only moved bytes count."""
    from engine.observe.activity import advanced

    before = {(10, 1.0): (5.0, 100)}
    assert advanced(before, {(10, 1.0): (6.0, 100)})                          # start-up: CPU is life
    assert not advanced(before, {(10, 1.0): (6.0, 100)}, count_cpu=False)     # a save: CPU alone is not
    assert advanced(before, {(10, 1.0): (5.0, 4196)}, count_cpu=False)        # bytes written are
    assert advanced(before, {(10, 1.0): (5.0, 100), (11, 2.0): (0.0, 0)}, count_cpu=False)   # a new worker is


def test_the_runs_first_validation_is_judged_by_its_life_and_later_ones_by_the_learnt_gap(tmp_path):
    """litgpt prints `Validating ...` and nothing until its result: the first validation of a run has no
    measured gap behind it, so it is phase `validating` (signs of life, CPU included, bounded by
    watch.save_timeout_s); once one is done its stretch is in the learnt gap, and the next is training."""
    from engine.core.config import WatchSettings
    from engine.core.state import CheckpointStatus, stall
    from engine.observe.events import ValidationStarted

    from engine.observe.observer import Observer

    assert ADAPTER.parse_line("Validating ...") == ValidationStarted()
    log = tmp_path / "trainer.log"
    log.write_text("")
    observer = Observer(ADAPTER, tmp_path, ProgressMeaning(256))
    observer.follow(log, ProgressMeaning(256))
    watch = WatchSettings(hang_timeout_s=600, hang_floor_s=5, hang_safety_factor=5, save_timeout_s=3600)
    trainer = TrainerStatus(alive=True, pid=None)
    t0 = observer.launched_at

    def observe(at: float, *lines: str):
        with open(log, "a") as fh:
            fh.writelines(line + "\n" for line in lines)
        return observer.snapshot(t0 + at, "running", trainer, CheckpointStatus(), observer.read_lines(t0 + at), watch)

    observe(1.0, progress(1, 6.4))
    snap = observe(1.5, progress(2, 6.3))
    assert (snap.trainer.phase, snap.hang_timeout_s) == ("training", 5.0)         # 5 x 0.5 s, the floor
    snap = observe(1.6, "Validating ...")
    assert snap.trainer.phase == "validating" and snap.trainer.seconds_since_activity == 0.0
    snap = observe(40.0)                                        # 38 s with no line: the learnt 5 s is far behind
    assert snap.trainer.phase == "validating"
    what, idle, limit = stall(snap)                             # no process to sample: idle since the line
    assert (what, round(idle, 6), limit) == ("first validation without a sign of life", 38.4, 5.0)
    snap = observe(41.0, validation(8, 5.9), progress(3, 6.2))   # the result, then training again
    assert snap.trainer.phase == "training" and round(observer.tracker.longest_gap_s, 6) == 39.5
    assert round(snap.hang_timeout_s, 6) == 197.5                # 5 x the gap that held the validation
    assert [round(x, 6) for x in observer.tracker.step_seconds] == [0.5]   # a validation's stretch is no step's time
    observe(42.0, progress(4, 6.1))
    snap = observe(42.1, "Validating ...")                       # the second one: inside the learnt gap
    assert snap.trainer.phase == "training"
    observer.tracker.new_launch(ProgressMeaning(256))             # a relaunch keeps what the run has measured
    assert observer.tracker.validations_done == 1 and observer.tracker.validation_started is None


def test_a_relaunch_is_at_the_step_it_resumes_from_until_it_prints_one():
    """A recovery stops the old trainer without reading its last lines, so before the relaunch's first progress line
    the last step read is the old process's. A rollback from step 12 to checkpoint 8, then a relaunch that dies in
    its start-up: its incident is at step 8 (0 steps lost), not at 12 (which would count the 4 the rollback lost a
    second time)."""
    tracker = MetricTracker(ProgressMeaning(256))
    feed(tracker, [(i, progress(i + 1, 6.0)) for i in range(12)])
    assert (tracker.metrics().step, tracker.metrics().iter_num) == (12, 48)
    tracker.new_launch(ProgressMeaning(256), resumed_step=8)
    metrics = tracker.metrics()
    assert (metrics.step, metrics.iter_num, metrics.tokens) == (8, None, None)   # its micro-batch count is its own
    feed(tracker, [(30.0, progress(9, 6.0))])
    assert (tracker.metrics().step, tracker.metrics().iter_num) == (9, 36)
    tracker.new_launch(ProgressMeaning(256), resumed_step=0)   # a rollback with no clean checkpoint: from scratch
    assert tracker.metrics().step == 0
    first = MetricTracker(ProgressMeaning(256))
    first.new_launch(ProgressMeaning(256), resumed_step=0)   # nothing read yet: the step stays unknown
    assert first.metrics().step is None
