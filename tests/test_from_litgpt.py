"""`runbook init --from-litgpt`: a user's litgpt pretrain YAML (the shapes litgpt publishes in
config_hub/pretrain/) as the run's base, one source of truth, supervised through a preemption."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from engine.config import load_config
from engine.trainers.litgpt.launch import trainer_config
from engine.yaml_source import round_trip_yaml
from tests.conftest import RUNBOOK, stop_process, wait_for

# Shaped like config_hub/pretrain/pythia-14m.yaml (comments as litgpt writes them), pointed at local data.
PYTHIA = """\
# The name of the model to pretrain. Choose from names in ``litgpt.config``. (type: Optional[str], default: null)
model_name: pythia-14m

# Directory in which to save checkpoints and logs. (type: <class 'Path'>, default: out/pretrain)
out_dir: out/pretrain/pythia-14m

# The precision to use for pretraining. (type: Optional[str], default: null)
precision: 32-true

# Data-related arguments.
data:
  class_path: litgpt.data.TextFiles
  init_args:
    train_data_path: corpus/train
    val_data_path: corpus/val
    num_workers: 0

# Training-related arguments. See ``litgpt.args.TrainArgs`` for details
train:
  save_interval: 5
  log_interval: 1
  global_batch_size: 16   # Number of samples per optimizer step across data-parallel ranks
  micro_batch_size: 4
  lr_warmup_steps: 2
  max_tokens: 10240
  max_seq_length: 64
  tie_embeddings: false
  max_norm: 1.0
  min_lr: 6.0e-05

# Evaluation-related arguments. See ``litgpt.args.EvalArgs`` for details
eval:
  interval: 1000
  max_iters: 2
  initial_validation: false
  final_validation: false

# Optimizer-related arguments
optimizer:
  class_path: torch.optim.AdamW
  init_args:
    lr: 0.003           # (type: float, default: 0.001)
    weight_decay: 0.1
    betas:
      - 0.9
      - 0.95

devices: auto
num_nodes: 1
tokenizer_dir: tokenizer
logger_name: csv
seed: 42
"""

# Shaped like config_hub/pretrain/tinyllama.yaml: a model_config instead of a model_name.
TINYLLAMA_MODEL = """\
model_name: tiny-llama-1.1b
model_config:
  name: tiny-llama-1.1b
  hf_config:
    org: TinyLlama
    name: TinyLlama-1.1B-intermediate-step-1431k-3T
  block_size: 2048
  vocab_size: 32000
  padding_multiple: 64
  n_layer: 22
  n_head: 32
  n_embd: 2048
  rotary_percentage: 1.0
  parallel_residual: false
  bias: false
  norm_class_name: RMSNorm
  norm_eps: 1.0e-05
  mlp_class_name: LLaMAMLP
  intermediate_size: 5632
  n_query_groups: 4
"""

# The override that makes pythia-14m's shape tiny enough for two CPU cores (trainer.extra).
TINY = {"model_config": {"name": "pythia-14m", "block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64,
                         "vocab_size": 512, "padded_vocab_size": 512, "bias": True, "rotary_percentage": 0.25,
                         "parallel_residual": True}}


def _user_project(root: Path, shared_data: Path, litgpt_yaml: str = PYTHIA) -> Path:
    """A litgpt user's folder: their pretrain YAML, their .txt folders (one train shard: quick to
    tokenize) and their tokenizer."""
    root.mkdir(parents=True)
    shutil.copytree(shared_data / "stdlib", root / "corpus", ignore=shutil.ignore_patterns("shard-00[123].txt"))
    (root / "tokenizer").symlink_to(shared_data / "tokenizer")
    (root / "litgpt").mkdir()
    (root / "litgpt" / "pretrain.yaml").write_text(litgpt_yaml)
    return root


def _init(root: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, "init", "--from-litgpt", str(root / "litgpt" / "pretrain.yaml"), str(root), *extra],
                          capture_output=True, text=True, timeout=120)


def _shrink(config: Path) -> None:
    yaml = round_trip_yaml()
    tree = yaml.load(config.read_text())
    tree["trainer"]["extra"] = TINY
    with open(config, "w") as fh:
        yaml.dump(tree, fh)


def test_init_reads_the_litgpt_config_and_a_recovery_writes_back_into_it(tmp_path, shared_data):
    root = _user_project(tmp_path / "user", shared_data)
    result = _init(root)
    assert result.returncode == 0, result.stderr
    config = root / "configs" / "run_config.yaml"
    loaded = load_config(config)
    cfg = loaded.config
    assert (cfg.micro_batch_size, cfg.batch_size, cfg.lr, cfg.save_interval, cfg.max_tokens, cfg.seed) == (4, 16, 0.003, 5, 10240, 42)
    assert loaded.out_dir == root / "out" / "pretrain" / "pythia-14m" and cfg.model.block_size == 64
    assert loaded.data_path("train_dir") == root / "corpus" / "train" and not cfg.data.make_default

    generated = trainer_config(loaded, Path(), Path(), None)
    assert generated["model_name"] == "pythia-14m" and "model_config" not in generated   # litgpt's own pythia-14m
    assert generated["logger_name"] == "csv" and generated["eval"]["max_iters"] == 2
    assert generated["optimizer"]["init_args"] == {"lr": 0.003, "weight_decay": 0.1, "betas": [0.9, 0.95]}
    assert generated["train"]["log_interval"] == 1 and generated["out_dir"] == str(loaded.out_dir)

    run_config_before = config.read_text()
    loaded.write_back({"lr": 0.0015, "micro_batch_size": 2})   # what the loss-spike and oom playbooks write
    litgpt_text = (root / "litgpt" / "pretrain.yaml").read_text()
    assert "lr: 0.0015" in litgpt_text and "micro_batch_size: 2" in litgpt_text
    assert "# (type: float, default: 0.001)" in litgpt_text and "# Number of samples per optimizer step" in litgpt_text
    assert config.read_text() == run_config_before
    assert (load_config(config).config.lr, load_config(config).config.micro_batch_size) == (0.0015, 2)


def test_a_tinyllama_style_model_config_is_passed_through(tmp_path, shared_data):
    root = _user_project(tmp_path / "user", shared_data, PYTHIA.replace("model_name: pythia-14m\n", TINYLLAMA_MODEL))
    assert _init(root).returncode == 0
    loaded = load_config(root / "configs" / "run_config.yaml")
    assert loaded.config.model.block_size == 64   # train.max_seq_length
    generated = trainer_config(loaded, Path(), Path(), None)
    assert generated["model_config"]["n_query_groups"] == 4 and generated["model_config"]["mlp_class_name"] == "LLaMAMLP"


def test_init_refuses_bad_inputs_in_one_sentence(tmp_path, shared_data):
    missing = subprocess.run([RUNBOOK, "init", "--from-litgpt", str(tmp_path / "nope.yaml"), str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 9 and "no file" in missing.stderr and "Traceback" not in missing.stderr
    root = _user_project(tmp_path / "user", shared_data, PYTHIA.replace("    lr: 0.003", "    foo: 1"))
    no_lr = _init(root)
    assert no_lr.returncode == 3 and "optimizer.init_args.lr is not set" in no_lr.stderr and "Traceback" not in no_lr.stderr
    assert not (root / "configs" / "run_config.yaml").exists()
    (root / "litgpt" / "pretrain.yaml").write_text(PYTHIA)
    assert _init(root).returncode == 0
    again = _init(root)
    assert again.returncode == 3 and "already exists" in again.stderr


def _run(root: Path, preempt: bool) -> dict:
    config = root / "configs" / "run_config.yaml"
    log = open(root / "watch.log", "ab")
    watcher = subprocess.Popen([RUNBOOK, "watch", str(config)], stdout=log, stderr=subprocess.STDOUT, cwd=root)
    out_dir = root / "out" / "pretrain" / "pythia-14m"
    try:
        if preempt:
            wait_for(lambda: (out_dir / "step-00000005" / "model_config.yaml").exists(), 240, what="first checkpoint")
            os.kill(int((root / "runs" / "pretrain" / "trainer.pid").read_text()), signal.SIGTERM)
        assert watcher.wait(timeout=300) == 0, (root / "watch.log").read_text()
    finally:
        stop_process(watcher)
    from engine.trainers.litgpt.resume import read_progress

    return read_progress(out_dir / "final" / "lit_model.pth")


def test_a_litgpt_users_config_is_supervised_through_a_preemption_with_step_and_token_parity(tmp_path, shared_data):
    progress = {}
    for name, preempt in (("undisturbed", False), ("preempted", True)):
        root = _user_project(tmp_path / name, shared_data)
        assert _init(root).returncode == 0
        _shrink(root / "configs" / "run_config.yaml")
        progress[name] = _run(root, preempt)
    assert progress["preempted"] == progress["undisturbed"] and progress["undisturbed"]["step_count"] == 10
    journal = (tmp_path / "preempted" / "runs" / "pretrain" / "journal.jsonl").read_text()
    assert '"kind": "launch", "launch": 2' in journal and "step-00000005/lit_model.pth" in journal
    incidents = list((tmp_path / "preempted" / "runs" / "pretrain" / "incidents").glob("incident-*.json"))
    assert len(incidents) == 1 and '"playbook": "preemption"' in incidents[0].read_text()
    assert list((tmp_path / "preempted" / "out" / "pretrain" / "pythia-14m").glob("logs/csv/**/metrics.csv")) \
        or list((tmp_path / "preempted" / "out" / "pretrain" / "pythia-14m").rglob("metrics.csv"))   # the csv logger ran
