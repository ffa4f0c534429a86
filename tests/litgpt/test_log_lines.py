"""The litgpt contract, its log: what litgpt 0.5.13 really prints in a real run, read by the litgpt adapter's
parser (engine/trainers/litgpt/log_lines.py) into the events the watcher acts on.

No line here is written by hand: the log is the shared reference run's (tests/conftest.py, litgpt_reference_run:
40 optimizer steps, a checkpoint every 10, a validation every 20), and each value the parser reads is checked
against a second channel litgpt writes itself: its CSV logger's metrics.csv (losses, iteration times,
validation losses) and the checkpoint folders on disk (saves). A change of wording or layout in litgpt's
output fails here, and no hand-written line elsewhere can hide it. The resumed line after a resume is read
from the preemption run's second launch (tests/litgpt/test_preemption.py, which makes that run).
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

from engine.observe.events import CheckpointSaving, FinalValidation, Progress, Resumed, Validation, ValidationStarted
from engine.trainers import adapter_for
from engine.trainers.run_config import load_config

ADAPTER = adapter_for("litgpt")   # the adapter the watcher reads a litgpt run with
# The words of every line that carries an event. A line that has them and does not parse is a format change
# the parser missed: each is checked, so a reworded line cannot simply drop out of the counts.
EVENT_WORDS = re.compile(r"\| loss train:|\bval loss\b|Saving checkpoint|Resuming training|Final evaluation|^Validating")


def read_events(log: Path) -> list:
    """The events of a trainer log, in order; fails on a line that looks like an event and does not parse."""
    events, missed = [], []
    for line in log.read_text(errors="replace").splitlines():
        event = ADAPTER.parse_line(line)
        if event is not None:
            events.append(event)
        elif EVENT_WORDS.search(line):
            missed.append(line)
    assert not missed, f"litgpt printed event lines the adapter does not read: {missed[:5]}"
    return events


def metrics_rows(out_dir: Path, version: int = 0) -> list[dict]:
    """litgpt's CSV logger's rows for one launch (logs/csv/version_N/metrics.csv under out_dir)."""
    path = out_dir / "logs" / "csv" / f"version_{version}" / "metrics.csv"
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def assert_progress_matches_metrics(progress: list[Progress], rows: list[dict], micro_batches_per_step: int) -> None:
    """Each progress event is one optimizer step, its counters and loss as litgpt's logger recorded them
    (printed to 3 decimals, `iter time` to 2 decimals of a millisecond)."""
    by_iter = {int(r["iter"]): r for r in rows if r.get("iter")}
    for event in progress:
        assert event.is_step and event.iter_num == event.step * micro_batches_per_step, event
        row = by_iter[event.iter_num]
        assert abs(event.loss - float(row["loss"])) <= 0.0005 + 1e-9, (event, row["loss"])
        assert abs(event.iter_time_ms - 1000 * float(row["iter_time"])) <= 0.005 + 1e-6, (event, row["iter_time"])


def test_litgpt_s_real_log_is_read_into_every_progress_save_and_validation_event(litgpt_reference_run):
    project = litgpt_reference_run["project"]
    cfg = load_config(project.config).config
    micro_batches = cfg.batch_size // cfg.micro_batch_size
    [log] = sorted((project.run_dir / "logs").glob("trainer-*.log"))   # one launch, undisturbed
    events = read_events(log)

    # Progress: every optimizer step of the run exactly once, in order, to the final checkpoint's counters.
    progress = [e for e in events if isinstance(e, Progress)]
    final = litgpt_reference_run["progress"]
    assert [e.step for e in progress] == list(range(1, final["step_count"] + 1))
    assert progress[-1].iter_num == final["iter_num"]
    assert_progress_matches_metrics(progress, metrics_rows(project.out_dir), micro_batches)
    assert all(math.isfinite(e.loss) and e.iter_time_ms > 0 for e in progress)

    # Saves: one announcement per checkpoint folder on disk, in step order, final/ last, each announced after
    # the progress line of the step it holds (the observer attributes a save to the step before it).
    steps_on_disk = sorted(s for p in project.out_dir.iterdir() if (s := ADAPTER.layout.step_of(p.name)) is not None)
    assert steps_on_disk == list(range(cfg.save_interval, final["step_count"] + 1, cfg.save_interval))
    folders = [project.step_dir(s) for s in steps_on_disk] + [project.out_dir / "final"]
    saves = [e for e in events if isinstance(e, CheckpointSaving)]
    assert [e.path for e in saves] == [str(ADAPTER.layout.resume_file(f)) for f in folders]
    assert all(ADAPTER.layout.resume_file(f).is_file() for f in folders)
    for i, event in enumerate(events):
        if isinstance(event, CheckpointSaving):
            last_step = [e.step for e in events[:i] if isinstance(e, Progress)][-1]
            expected = final["step_count"] if event.path.endswith("/final/lit_model.pth") else ADAPTER.layout.step_in_path(event.path)
            assert last_step == expected, (event, last_step)
    # The same announcements as the partial-save check reads them from the raw log bytes.
    announced = ADAPTER.layout.announced_saves(log.read_bytes(), project.out_dir)
    assert announced == {f.name for f in folders}

    # Validation: announced (`Validating ...`) then its result, at every eval_interval-th step, then litgpt's
    # final evaluation; the losses are the ones litgpt's logger recorded (printed to 4 and 3 decimals).
    validations = [e for e in events if isinstance(e, (ValidationStarted, Validation, FinalValidation))]
    every = cfg.trainer.eval_interval
    expected_iters = [s * micro_batches for s in range(every, final["step_count"] + 1, every)]
    assert [type(e) for e in validations] == [ValidationStarted, Validation] * len(expected_iters) + [ValidationStarted, FinalValidation]
    measured = [e for e in validations if isinstance(e, Validation)]
    assert [e.iter_num for e in measured] == expected_iters
    logged = [float(r["val_loss"]) for r in metrics_rows(project.out_dir) if r.get("val_loss")]
    assert len(logged) == len(measured) + 1, logged
    assert all(abs(e.val_loss - v) <= 0.00005 + 1e-9 for e, v in zip(measured, logged)), (measured, logged)
    assert abs(validations[-1].val_loss - logged[-1]) <= 0.0005 + 1e-9, (validations[-1], logged[-1])

    # An undisturbed run resumes nothing.
    assert not [e for e in events if isinstance(e, Resumed)]
