"""One read model of a run: the watch (its observer, heartbeat figures and Prometheus metrics) and `runbook status`
show the same tokens/s from the same recorded lines, because both read them with the observer's parser, the trainer
adapter's word on what a progress line means and one throughput arithmetic (engine/observe/throughput.py).

The logs under tests/data/logs/ are real trainer output, copied from runs of this repository's tests:
litgpt_2_devices.log  litgpt pretrain on 2 CPU ranks (gloo), micro-batch 4, global batch 16, block 64 (so 2
                      micro-batches a step on each rank); its save line (a temporary path) left out.
hf_accumulation_4.log examples/hf_trainer/train.py resumed with micro-batch 2 and gradient_accumulation_steps 4
                      (batch 8, block 32), runbook's callback and HF's own logged dicts; its save lines left out.
"""

from __future__ import annotations

import io
import json
import shutil
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from engine.core.state import CheckpointStatus, RunPhase, TrainerStatus
from engine.language.metric_needs import METRIC_NAMES
from engine.language.playbook_set import load_run_playbooks
from engine.core.yaml_source import SourceError
from engine.observe.observer import Observer
from engine.process.trainer_control import TrainerControl
from engine.records.journal import Journal
from engine.trainers import adapter_for
from engine.trainers.base import PLAYBOOK_METRICS
from engine.trainers.run_config import load_config
from engine.trainers.script import lines as sdk_lines
from engine.watch.metrics import WatcherView, metric_families
from runbook import sdk
from runbook.commands.status_cmd import gather
from tests.conftest import REPO

LOGS = REPO / "tests" / "data" / "logs"


def project(root: Path, config: dict, log: str) -> Path:
    (root / "configs").mkdir(parents=True)
    path = root / "configs" / "run_config.yaml"
    path.write_text(json.dumps(config))
    (root / "runs" / "pretrain" / "logs").mkdir(parents=True)
    shutil.copy(LOGS / log, root / "runs" / "pretrain" / "logs" / "trainer-001.log")
    return path


def watch_figures(config_path: Path) -> tuple[float, int, float]:
    """tokens/s as the watch's snapshot, its heartbeat's Prometheus gauge; and the snapshot's tokens."""
    loaded = load_config(config_path)
    adapter = adapter_for(loaded.config.trainer.kind)
    control = TrainerControl(loaded, adapter, Journal(loaded.folder.journal), "sha256:test")
    observer = Observer(adapter, loaded.out_dir, control.progress_meaning)
    observer.follow(loaded.run_dir / "logs" / "trainer-001.log", control.progress_meaning)
    now = time.time()
    observer.read_lines(now)
    snap = observer.snapshot(now, RunPhase.RUNNING, TrainerStatus(pid=1, alive=False, launches=1), CheckpointStatus(),
                             [], loaded.config.watch)
    gauge = next(f for f in metric_families(WatcherView(RunPhase.RUNNING, snap, (), None, now))
                 if f.name == "runbook_tokens_per_second")
    return snap.metrics.tokens_per_sec, snap.metrics.tokens, gauge.samples[0][1]


def test_litgpt_on_two_devices_status_and_watch_show_the_same_tokens_per_second(tmp_path):
    config = project(tmp_path, {"micro_batch_size": 4, "batch_size": 16, "max_tokens": 16 * 64 * 40,
                                "model": {"block_size": 64}, "trainer": {"devices": 2}}, "litgpt_2_devices.log")
    watch_tps, tokens, gauge = watch_figures(config)
    # By hand: the last 10 lines' iter times after the first (set-up) line; one micro-batch of 4 x 64 on each of 2 ranks.
    times = [46.69, 54.29, 58.25, 67.14, 100.95, 103.56, 52.89, 44.44, 42.00, 46.12]
    assert watch_tps == pytest.approx(4 * 64 * 2 * len(times) / (sum(times) / 1000))   # 8307.2, not one rank's 4153.6
    assert gauge == watch_tps and tokens == 22 * 4 * 64 * 2 == 11 * 16 * 64   # iter 22 = step 11 of the global batch
    progress = gather(load_config(config))["progress"]
    assert progress["tokens_per_sec"] == round(watch_tps, 1) and progress["tokens"] == tokens
    # 29 optimizer steps left of 16 x 64 tokens each
    assert progress["eta_seconds"] == round((40 - 11) * 16 * 64 / watch_tps)


def test_hf_trainer_with_accumulation_4_status_and_watch_show_the_same_tokens_per_second(tmp_path):
    config = project(tmp_path, {"micro_batch_size": 2, "batch_size": 8, "max_tokens": 24 * 8 * 32,
                                "model": {"block_size": 32},
                                "trainer": {"kind": "hf-trainer", "script": "train.py"}}, "hf_accumulation_4.log")
    watch_tps, tokens, gauge = watch_figures(config)
    # A callback line per optimizer step: 2 x 4 accumulated micro-batches x 32 tokens, over the newest 10 'took' of
    # steps 6..19 (step 5's line is the resume's first: set-up included).
    took = [40.1, 43.9, 36.1, 83.5, 47.4, 18.4, 42.6, 55.7, 19.0, 16.0, 16.1, 27.1, 34.0, 41.5][-10:]
    assert watch_tps == pytest.approx(2 * 4 * 32 * len(took) / (sum(took) / 1000))
    assert gauge == watch_tps and tokens == 19 * 8 * 32
    progress = gather(load_config(config))["progress"]
    assert progress["tokens_per_sec"] == round(watch_tps, 1) and progress["tokens"] == tokens
    assert progress["eta_seconds"] == round((24 - 19) * 8 * 32 / watch_tps)


def test_grad_norm_and_lr_are_filled_from_the_hf_callbacks_line_and_from_the_sdk_line(tmp_path):
    hf_config = project(tmp_path / "hf", {"micro_batch_size": 2, "batch_size": 8, "model": {"block_size": 32},
                                          "trainer": {"kind": "hf-trainer", "script": "train.py"}}, "hf_accumulation_4.log")
    loaded = load_config(hf_config)
    adapter = adapter_for("hf-trainer")
    observer = Observer(adapter, loaded.out_dir, adapter.progress_meaning(loaded.config))
    # HF's logged dict as a run without runbook's callback prints it (read as another stack's line)
    observer.take_lines(["{'loss': '4.379', 'grad_norm': '0.7525', 'learning_rate': '0.0025', 'epoch': '0.009615'}"], 0.0)
    assert (observer.tracker.metrics().grad_norm, observer.tracker.metrics().lr) == (0.7525, 0.0025)

    printed = io.StringIO()
    with redirect_stdout(printed):
        sdk.progress(12, 3.25, grad_norm=0.5, lr=3e-4)   # the callback passes HF's logs['grad_norm'], ['learning_rate']
        sdk.progress(13, 3.5)                            # a script that gives neither
    first, second = printed.getvalue().splitlines()
    event = sdk_lines.parse(first, lambda folder: folder)
    assert (event.step, event.loss, event.grad_norm, event.lr) == (12, 3.25, 0.5, 3e-4)
    observer = Observer(adapter, loaded.out_dir, adapter.progress_meaning(loaded.config))
    observer.take_lines([first], 0.0)
    assert (observer.tracker.metrics().grad_norm, observer.tracker.metrics().lr) == (0.5, 3e-4)
    observer.take_lines([second], 1.0)   # the newest line's word: it printed none
    assert (observer.tracker.metrics().grad_norm, observer.tracker.metrics().lr) == (None, None)


GRAD_PLAYBOOK = """\
name: exploding-gradients
description: the gradient norm ran away
severity: warning
match:
  metric:
    name: grad_norm
    op: ">"
    value: 100
actions:
  - escalate: {reason: "grad norm {{ state.metrics.grad_norm }}"}
"""


def test_a_playbook_on_a_metric_its_trainer_kind_never_prints_is_refused_with_file_and_line(tmp_path):
    (tmp_path / "playbooks").mkdir(parents=True)
    (tmp_path / "playbooks" / "grad.yaml").write_text(GRAD_PLAYBOOK)
    config = {"playbooks": {"paths": ["../playbooks"]}, "micro_batch_size": 2, "batch_size": 8}
    litgpt = project(tmp_path / "l", config, "litgpt_2_devices.log")
    (tmp_path / "l" / "playbooks").symlink_to(tmp_path / "playbooks")
    loaded = load_config(litgpt)
    with pytest.raises(SourceError) as refused:
        load_run_playbooks(loaded, adapter_for("litgpt"))
    message = "\n".join(refused.value.messages)
    assert f"{tmp_path / 'playbooks' / 'grad.yaml'}:6:5: match.metric.name:" in message   # `name: grad_norm`
    assert "trainer kind 'litgpt' never prints grad_norm" in message
    hf = project(tmp_path / "h", {**config, "trainer": {"kind": "hf-trainer", "script": "train.py"}}, "hf_accumulation_4.log")
    (tmp_path / "h" / "playbooks").symlink_to(tmp_path / "playbooks")
    names = [p.name for p in load_run_playbooks(load_config(hf), adapter_for("hf-trainer"))]   # HF prints it
    assert "exploding-gradients" in names


def test_the_trainers_metric_names_are_the_playbook_languages():
    assert PLAYBOOK_METRICS == METRIC_NAMES
