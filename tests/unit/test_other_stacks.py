"""Another stack's progress and loss lines (engine/observe/other_stacks.py) read by the watcher's observer.

The live tests go through the watcher's own path for a running trainer: a log file followed by the
Observer (the default trainer adapter, litgpt, reads none of these lines), its snapshot, and the
shipped playbooks' decide. Lines are the stacks' own, from tests/field/corpus where a case has them:
  hf_trainer.yaml / trl.yaml: HF's logged dicts ({'loss': 0.0, 'grad_norm': nan, ...}, {'loss': nan, ...});
  deepspeed.yaml: {'loss': 2.0491, 'learning_rate': 0.0001961913563176343, 'epoch': 0.28};
  megatron_deepspeed.yaml / nemo.yaml: Megatron's ` iteration       10/     100 | ... | lm loss: ... |`;
  mlx.yaml: `Iter 10: Train loss nan, Learning Rate 1.000e-05, ...`; keras.yaml: `100/100 [===...] - ... - loss: 0.2445`.
nanoGPT's `iter N: loss X, time Yms, mfu Z%` is the format of karpathy/nanoGPT's train.py print.
"""

from __future__ import annotations

import math

from engine.observe.throughput import ProgressMeaning
from engine.core.config import WatchSettings
from engine.core.state import CheckpointStatus, TrainerStatus
from engine.language.matcher import AttemptHistory, MatchMemory, decide
from engine.language.playbook_set import load_set
from engine.language.playbook_testing import build_config
from engine.observe.observer import Observer
from engine.observe.other_stacks import other_stack_progress
from engine.trainers.litgpt.adapter import LitGPTAdapter
from engine.trainers.script.adapter import ScriptAdapter
from engine.watch.triage import _NoEvidence

HF_HEALTHY = "{'loss': 2.0491, 'learning_rate': 0.0001961913563176343, 'epoch': 0.28}"   # deepspeed.yaml
HF_NAN = "{'loss': nan, 'learning_rate': 0.00027248908296943227, 'epoch': 0.51}"          # hf_trainer.yaml
HF_NAN_GRAD = "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 0.00012142857142857143, 'epoch': 0.0}"   # hf_trainer.yaml
MEGATRON = ("[2026-04-20 03:17:07] iteration       50/      50 | consumed samples:        25600 | elapsed time per "
            "iteration (ms): 9969.4 | learning rate: 4.500000E-06 | global batch size:   512 | lm loss: 4.791878E-03 | "
            "seq_load_balancing_loss: 9.546359E-01 | loss scale: 1.0 | grad norm: 0.022 | number of skipped iterations:   0 |")   # nemo.yaml
MEGATRON_NAN_GRAD = (" iteration       10/     100 | consumed samples:           10 | consumed tokens:        40960 | elapsed "
                     "time per iteration (ms): 2208.9 | learning rate: 3.000E-04 | global batch size:     1 | lm loss: "
                     "1.461212E+01 | loss scale: 1.0 | grad norm: nan | actual seqlen:  4096 |")   # megatron_deepspeed.yaml
# Megatron-DeepSpeed leaves a NaN loss out of its line (training_log prints a loss `if avg > 0.0`): megatron_deepspeed.yaml,
# deepspeedai/Megatron-DeepSpeed#434's example.
MEGATRON_NAN_DROPPED = (" iteration        9/      10 | consumed samples:          108 | consumed tokens:       442368 | elapsed "
                        "time per iteration (ms): 1979.2 | learning rate: 4.219E-07 | global batch size:    12 | loss scale: 1.0 "
                        "| actual seqlen:  4096 | number of skipped iterations:   0 | number of nan iterations:   0 | samples "
                        "per second: 6.063 | tokens per gpu per second (tgs): 2069.506 | TFLOPs: 127.00 |")
# fp16's loss-scale warm-up: every iteration of the interval skipped, so no loss either, and no NaN (Megatron-LM,
# BigScience's GPT-2 notes for Jean Zay, a public repository's experiments/gpt2.md).
MEGATRON_WARMUP = (" iteration       10/    1000 | consumed samples:           40 | elapsed time per iteration (ms): 3974.1 | "
                   "learning rate: 0.000E+00 | global batch size:     4 | loss scale: 8388608.0 | number of skipped "
                   "iterations:  10 | number of nan iterations:   0 |")
MLX_NAN = ("Iter 10: Train loss nan, Learning Rate 1.000e-05, It/sec 0.264, Tokens/sec 530.838, Trained Tokens 20105, "
           "Peak mem 16.146 GB")   # mlx.yaml
KERAS = "100/100 [==============================] - 328s 3s/step - loss: 0.2445 - val_loss: 0.2342"   # keras.yaml
NANOGPT = "iter 100: loss 2.3456, time 123.45ms, mfu 12.34%"


def test_each_stacks_line_is_a_progress_event_with_its_step_and_loss():
    hf = other_stack_progress(HF_HEALTHY, 6)
    assert (hf.step, hf.loss) == (7, 2.0491) and math.isnan(hf.iter_time_ms)   # HF prints no step: counted on,
    assert not hf.step_known                                                      # and marked as no step
    assert other_stack_progress(MEGATRON, None).step_known
    assert math.isnan(other_stack_progress(HF_NAN, None).loss)
    assert math.isnan(other_stack_progress(HF_NAN_GRAD, None).loss)   # the step's update was non-finite
    mega = other_stack_progress(MEGATRON, None)
    assert (mega.step, mega.loss, mega.iter_time_ms) == (50, 4.791878e-03, 9969.4)
    assert math.isnan(other_stack_progress(MEGATRON_NAN_GRAD, None).loss)
    dropped = other_stack_progress(MEGATRON_NAN_DROPPED, None)
    assert dropped.step == 9 and math.isnan(dropped.loss) and dropped.iter_time_ms == 1979.2
    assert other_stack_progress(MEGATRON_WARMUP, None) is None     # all skipped: no loss, and no NaN either
    counted = MEGATRON.replace("| number of skipped iterations:   0 |", "| number of skipped iterations:   0 | number of nan iterations:   2 |")
    assert math.isnan(other_stack_progress(counted, None).loss)    # Megatron counted NaN iterations
    named = MEGATRON_NAN_DROPPED.replace("| loss scale:", "| mlm loss: 2.5 | loss scale:")
    assert other_stack_progress(named, None) is None               # a loss of another name: not this module's to read
    mlx = other_stack_progress(MLX_NAN, None)
    assert mlx.step == 10 and math.isnan(mlx.loss)
    assert other_stack_progress(KERAS, 99).loss == 0.2445
    assert other_stack_progress("100/100 ━━━━━━━━━━━━━━━━━━━━ 3s 30ms/step - loss: 0.2445", 4).step == 5   # Keras 3's bar
    assert other_stack_progress("Iter 10: Train loss 2.345", None).loss == 2.345   # older mlx examples end the line there
    nano = other_stack_progress(NANOGPT, None)
    assert (nano.step, nano.loss, nano.iter_time_ms) == (100, 2.3456, 123.45)


def test_other_lines_and_hostile_ones_are_no_progress():
    for line in ("{'train_runtime': 12.3, 'train_loss': 2.1, 'epoch': 3.0}",   # HF's summary: no step
                 " iteration        9/      10 | consumed samples:          108 | loss scale: 1.0 |",   # no lm loss
                 "the loss: 2.0 was fine", "Iter 10: Val loss 2.1, Val took 3.2s", "",
                 "{'loss': " + "9" * 100_000 + ", 'epoch': 1}", "1/1 [" + "=" * 10_000_000 + "] - loss: 1.0"):
        assert other_stack_progress(line, None) is None, line[:80]


def watch_live(tmp_path, adapter, lines: list[str], silent_for: float):
    """The observer following a live trainer's log: `lines` printed one second apart, then `silent_for`
    seconds of nothing; the shipped playbooks' decision on the last snapshot (None: nothing fires)."""
    log = tmp_path / "trainer.log"
    log.write_text("")
    observer = Observer(adapter, tmp_path, ProgressMeaning(256))
    observer.evidence = _NoEvidence()
    observer.follow(log, ProgressMeaning(256))
    watch = WatchSettings(hang_timeout_s=60, hang_floor_s=30, startup_timeout_s=600)
    trainer = TrainerStatus(alive=True, pid=None, launches=1)
    t0, snapshot = observer.launched_at, None
    for i, line in enumerate(lines, start=1):
        with open(log, "a") as fh:
            fh.write(line + "\n")
        snapshot = observer.snapshot(t0 + i, "running", trainer, CheckpointStatus(), observer.read_lines(t0 + i), watch)
    end = t0 + len(lines) + silent_for
    snapshot = observer.snapshot(end, "running", trainer, CheckpointStatus(), observer.read_lines(end), watch)
    config = build_config({"watch": {"hang_timeout_s": 60, "hang_floor_s": 30}})
    decision = decide(snapshot, config, load_set([], True)[0], MatchMemory(), AttemptHistory()).decision
    return snapshot, (decision.playbook.name if decision else None)


def _hf_steps(count: int) -> list[str]:
    return [f"{{'loss': {2.5 - 0.01 * i:.4f}, 'grad_norm': 0.91, 'learning_rate': 5e-05, 'epoch': {i / 100:.2f}}}"
            for i in range(count)]


def test_a_live_hf_run_that_keeps_printing_its_dicts_is_not_a_hang(tmp_path):
    snapshot, fired = watch_live(tmp_path, LitGPTAdapter(), _hf_steps(12) + [HF_HEALTHY], silent_for=1)
    assert fired is None
    assert (snapshot.trainer.phase, snapshot.metrics.loss) == ("training", 2.0491)
    # HF's dict prints no step: the count of its lines is not taken for one (no rollback bound comes of it)
    assert snapshot.metrics.step is None and snapshot.metrics.last_healthy_step is None


def test_a_live_hf_run_printing_a_nan_loss_is_nan(tmp_path):
    _, fired = watch_live(tmp_path, LitGPTAdapter(), _hf_steps(5) + [HF_NAN], silent_for=1)
    assert fired == "nan"
    _, fired = watch_live(tmp_path, LitGPTAdapter(), _hf_steps(5) + [HF_NAN_GRAD], silent_for=1)
    assert fired == "nan"


def test_a_live_hf_run_that_prints_then_goes_silent_is_a_hang(tmp_path):
    snapshot, fired = watch_live(tmp_path, LitGPTAdapter(), _hf_steps(12), silent_for=120)
    assert fired == "hang" and snapshot.metrics.loss == 2.39


def test_a_live_megatron_run_that_keeps_printing_is_not_a_hang_and_is_one_when_it_stops(tmp_path):
    lines = [MEGATRON.replace("iteration       50/", f"iteration       {n}/") for n in range(40, 51)]
    snapshot, fired = watch_live(tmp_path, LitGPTAdapter(), lines, silent_for=1)
    assert fired is None and snapshot.metrics.step == 50
    (tmp_path / "silent").mkdir()
    _, fired = watch_live(tmp_path / "silent", LitGPTAdapter(), lines, silent_for=120)
    assert fired == "hang"


def test_a_live_megatron_run_whose_line_drops_its_loss_is_nan(tmp_path):
    lines = [MEGATRON.replace("iteration       50/", f"iteration       {n}/") for n in range(40, 46)]
    _, fired = watch_live(tmp_path, LitGPTAdapter(), lines + [MEGATRON_NAN_DROPPED.replace("iteration        9/", "iteration       46/")],
                          silent_for=1)
    assert fired == "nan"
    (tmp_path / "warmup").mkdir()
    _, fired = watch_live(tmp_path / "warmup", LitGPTAdapter(), [MEGATRON_WARMUP] + lines, silent_for=1)
    assert fired is None


def test_the_trainers_own_progress_line_is_read_and_another_stacks_copy_of_it_is_not_counted(tmp_path):
    """An hf-trainer run with runbook's callback prints HF's dict, then runbook's line for the same step: one step."""
    lines = []
    for step in range(1, 6):
        lines += [f"{{'loss': {2.0 + step:.1f}, 'grad_norm': 0.5, 'learning_rate': 5e-05, 'epoch': 0.{step}}}",
                  f"runbook: step {10 * step} loss {2.0 + step:.1f} took 100.0 ms"]
    snapshot, _ = watch_live(tmp_path, ScriptAdapter(), lines, silent_for=1)
    assert snapshot.metrics.step == 50
    assert snapshot.metrics.loss_history == [3.0, 4.0, 5.0, 6.0, 7.0]   # each step's loss once


def test_the_reports_curve_reads_another_stacks_steps_and_never_beside_the_trainers_own(tmp_path):
    """runbook report / status (runbook/report.py parse_launch): a Megatron log's iterations are its curve; HF's
    dicts print no step, so no curve is drawn over a count of lines; a log with the adapter's own progress
    lines is read by those alone."""
    from runbook.report import parse_launch

    megatron = tmp_path / "megatron.log"
    megatron.write_text("\n".join(MEGATRON.replace("iteration       50/", f"iteration       {n}/") for n in (48, 49, 50)) + "\n")
    curve = parse_launch(1, megatron, None, LitGPTAdapter(), ProgressMeaning(256))
    assert curve.steps == [48, 49, 50] and curve.losses == [4.791878e-03] * 3
    hf = tmp_path / "hf.log"
    hf.write_text("\n".join(_hf_steps(4)) + "\n")
    assert parse_launch(1, hf, None, LitGPTAdapter(), ProgressMeaning(256)).steps == []
    own = tmp_path / "own.log"
    own.write_text(f"{NANOGPT}\nrunbook: step 10 loss 2.5 took 100.0 ms\n")
    assert parse_launch(1, own, None, ScriptAdapter(), ProgressMeaning(256)).steps == [10]
