"""The litgpt contract, a user's own config: `runbook init --from-litgpt` takes a litgpt pretrain YAML (the
shapes litgpt publishes in config_hub/pretrain/) as the run's base, one source of truth, and supervises it
through a preemption to the bit-identical weights of an undisturbed run of the same config (TextFiles and
LitData data modules)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from engine.trainers.run_config import load_config
from engine.trainers.litgpt.launch import trainer_config
from engine.core.yaml_source import round_trip_yaml
from tests.conftest import RUNBOOK, make_project, stop_process, wait_for, weights_digest

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
    """The tiny model (TINY), and no litgpt parse of the config before each watch: ~5 s of imports a watch that
    tests/litgpt/test_preflight.py proves (`runbook check` always runs it)."""
    yaml = round_trip_yaml()
    tree = yaml.load(config.read_text())
    tree["trainer"]["extra"] = TINY
    tree["trainer"]["preflight_parse"] = False
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


def _final_weights(root: Path) -> str:
    return weights_digest(root / "out" / "pretrain" / "pythia-14m" / "final" / "lit_model.pth")


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
    root = _user_project(tmp_path / "preempted", shared_data)
    assert _init(root).returncode == 0
    _shrink(root / "configs" / "run_config.yaml")
    # Parity with an undisturbed run of the same user config, run here (not a constant): the same counters
    # (a lost or repeated step shows in both) and bit-identical final weights. 10240 tokens / (16 samples
    # x 64 tokens) = 10 optimizer steps of 4 micro-batches (litgpt's iter_num counts micro-batches).
    preempted = _run(root, preempt=True)
    undisturbed = _user_project(tmp_path / "undisturbed", shared_data)
    assert _init(undisturbed).returncode == 0
    _shrink(undisturbed / "configs" / "run_config.yaml")
    # The preempted run tokenized the user's text (the cache runbook builds for TextFiles); the undisturbed one
    # starts with a copy: the same key (text, tokenizer, block size, data arguments; not paths), the same bytes
    # its launch would build, one litdata optimize (tens of seconds) fewer.
    shutil.copytree(root / "runs" / "pretrain" / "data", undisturbed / "runs" / "pretrain" / "data")
    reference = _run(undisturbed, preempt=False)
    built = [(r / "runs" / "pretrain" / "logs" / "trainer-001.log").read_text().count("runbook: data cache built")
             for r in (root, undisturbed)]
    assert built == [1, 0], built   # the preempted run's first launch built it the real way; the copy was used
    assert preempted == reference == {"step_count": 10, "iter_num": 40}
    assert _final_weights(root) == _final_weights(undisturbed)
    journal = (root / "runs" / "pretrain" / "journal.jsonl").read_text()
    assert '"kind": "launch", "launch": 2' in journal and "step-00000005/lit_model.pth" in journal
    incidents = list((root / "runs" / "pretrain" / "incidents").glob("incident-*.json"))
    assert len(incidents) == 1 and '"playbook": "preemption"' in incidents[0].read_text()
    assert list((root / "out" / "pretrain" / "pythia-14m").rglob("metrics.csv"))   # the user's csv logger ran


LITDATA = """\
data:
  class_path: litgpt.data.LitData
  init_args:
    data_path: optimized   # chunks written by litdata's optimize (here: litgpt's own TextFiles preparation)
    split_names:
      - train
      - val
    num_workers: 0
"""


def _optimized_data(root: Path, shared_data: Path) -> None:
    """What a LitData user has: folders of litdata chunks, made once by their own preprocessing. Here the chunks
    litgpt's TextFiles preparation made of the shared corpus (tokenizer, block size 64): the data cache the
    session builds once for the default project (tests/conftest.py, seed_data_cache), copied; not one more
    litdata optimize (two spawned interpreters and the tokenizing: tens of seconds)."""
    seeded = make_project(root.parent / "default-project", shared_data)
    [cache] = (seeded.run_dir / "data").iterdir()
    (root / "optimized").mkdir()
    for split in ("train", "val"):   # TextFiles nests its chunks as <split>/<split>
        shutil.copytree(cache / split / split, root / "optimized" / split)


def _litdata_yaml() -> str:
    start, end = PYTHIA.index("data:\n"), PYTHIA.index("# Training-related")
    return PYTHIA[:start] + LITDATA + "\n" + PYTHIA[end:]


def test_a_litdata_run_is_checked_supervised_through_a_preemption_and_replayed(tmp_path, shared_data):
    """Any data module litgpt accepts: LitData over the user's own optimized chunks is passed through
    unchanged, fingerprinted, checked up front (file:line in the user's YAML), supervised through a
    preemption to the configured budget, and its incident replays; a drill or replay copies the YAML."""
    from engine.trainers.run_config import load_config as load
    from engine.trainers.preflight import preflight
    from engine.trainers import adapter_for

    root = _user_project(tmp_path / "user", shared_data, _litdata_yaml())
    _optimized_data(root, shared_data)
    assert _init(root).returncode == 0
    config = root / "configs" / "run_config.yaml"
    _shrink(config)
    loaded = load(config)
    assert loaded.config.data.kind == "data-module"
    generated = trainer_config(loaded, Path(), Path(), None)
    assert generated["data"] == {"class_path": "litgpt.data.LitData", "init_args": {
        "data_path": "optimized", "split_names": ["train", "val"], "num_workers": 0}}   # as the user wrote it

    # A missing split is found before any launch, at its line in the user's YAML.
    (root / "optimized" / "val").rename(root / "optimized" / "val-away")
    problems = preflight(load(config), adapter_for(loaded.config.trainer.kind))
    litgpt_yaml = root / "litgpt" / "pretrain.yaml"
    line = _litdata_yaml().splitlines().index("data:") + 1
    assert any(p.startswith(f"{litgpt_yaml}:{line}:") and "val/index.json" in p for p in problems), problems
    (root / "optimized" / "val-away").rename(root / "optimized" / "val")

    user_yaml_before = litgpt_yaml.read_text()
    preempted = _run(root, preempt=True)
    # Parity with an undisturbed run of the same user config over the same chunks, as the pythia test's: the
    # same counters (a lost or repeated step shows in both) and bit-identical final weights (a loader resumed
    # at the wrong position of the user's chunks shows in them), to the configured budget of optimizer steps.
    undisturbed = _user_project(tmp_path / "undisturbed", shared_data, _litdata_yaml())
    shutil.copytree(root / "optimized", undisturbed / "optimized")   # the user's chunks, the same bytes
    assert _init(undisturbed).returncode == 0
    _shrink(undisturbed / "configs" / "run_config.yaml")
    reference = _run(undisturbed, preempt=False)
    assert preempted == reference, (preempted, reference)
    assert _final_weights(root) == _final_weights(undisturbed)
    budget = load(config).config
    assert reference["step_count"] == budget.max_tokens // (budget.batch_size * budget.model.block_size)
    run_dir = root / "runs" / "pretrain"
    incidents = list((run_dir / "incidents").glob("incident-*.json"))
    assert len(incidents) == 1 and '"playbook": "preemption"' in incidents[0].read_text()
    assert load(config).config.data_hash.startswith("sha256:module:")
    assert not (run_dir / "data").exists()   # runbook built no cache of its own: LitData reads the user's chunks

    replay = subprocess.run([RUNBOOK, "replay", "incident-1", str(config)], capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stdout + replay.stderr

    # A scratch run (drill, replay --execute) gets its own copy of the YAML: the user's is never written.
    from runbook.commands.drill_cmd import make_scratch_project
    from engine.watch.faults import FAULTS

    scratch = make_scratch_project(load(config), FAULTS["oom"], tmp_path / "drill")
    scratch_loaded = load(scratch)
    assert scratch_loaded.config.trainer.litgpt_config == tmp_path / "drill" / "litgpt" / "pretrain.yaml"
    assert scratch_loaded.out_dir == tmp_path / "drill" / "checkpoints" / "pretrain"
    assert scratch_loaded.config.micro_batch_size == FAULTS["oom"].config["micro_batch_size"]
    scratch_data = trainer_config(scratch_loaded, Path(), Path(), None)["data"]["init_args"]["data_path"]
    assert scratch_data == str(root / "optimized")
    scratch_loaded.write_back({"micro_batch_size": 1})   # what the oom playbook does in the drill
    assert litgpt_yaml.read_text() == user_yaml_before

    from runbook.commands.replay_execute import prepare_replay_run

    record = json.loads(incidents[0].read_text())
    replay_config = prepare_replay_run(record, load(config), load(config).playbook_paths)
    replayed = load(replay_config)
    assert replayed.out_dir == replay_config.parent.parent / "checkpoints"
    assert replayed.config.trainer.litgpt_config.parent.parent == replay_config.parent.parent
    assert litgpt_yaml.read_text() == user_yaml_before
