"""A hyperparameter runbook changes must reach the trainer (issue 34).

Seen: lr given in trainer.extra as well as in the litgpt config passed `runbook check`; the loss-spike
playbook's set_hyperparameters then rewrote the user's litgpt YAML (lr and the list indentation) while
every launch still trained at extra's lr 10: 4 wasted restarts. Now: (1) a managed hyperparameter in
trainer.extra is a config error in check and watch (exit 3, file:line), the user's files untouched;
(2) a write-back changes only the value's characters in the user's YAML; (3) every launch reads back
the trainer config it wrote, as litgpt parses it, and refuses to start on values other than the run
config's (in a recovery: the action fails and the incident escalates, no silent restart loop)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.core.yaml_source import SourceError
from engine.trainers.litgpt.launch import HyperparametersNotReached
from engine.trainers.registry import adapter_for
from engine.trainers.run_config import load_config
from runbook.exit_codes import ExitCode
from tests.conftest import REPO, RUNBOOK

# A litgpt user's pretrain YAML, lists indented the way many write them (4 spaces, dash at 2).
LITGPT = """\
model_name: pythia-14m
out_dir: out/pretrain   # checkpoints
data:
    class_path: litgpt.data.TextFiles
    init_args:
        train_data_path: corpus/train
        val_data_path: corpus/val
tokenizer_dir: tokenizer
train:
    save_interval: 5
    global_batch_size: 16
    micro_batch_size: 4
    max_tokens: 10240
    max_seq_length: 64
optimizer:
    class_path: torch.optim.AdamW
    init_args:
        lr: 0.003          # peak lr
        weight_decay: 0.1
        betas:
          - 0.9
          - 0.95
"""


def _litgpt_project(root: Path, extra: str = "{}") -> Path:
    (root / "configs").mkdir(parents=True)
    (root / "litgpt.yaml").write_text(LITGPT)
    config = root / "configs" / "run_config.yaml"
    config.write_text(f"run_dir: runs/pretrain\ntrainer:\n  kind: litgpt\n  litgpt_config: litgpt.yaml\n  extra: {extra}\n")
    return config


def _generated_project(root: Path, extra: str) -> Path:
    (root / "configs").mkdir(parents=True)
    config = root / "configs" / "run_config.yaml"
    text = (REPO / "configs" / "run_config.yaml").read_text()
    config.write_text(text.replace("trainer:\n  kind: litgpt\n", f"trainer:\n  kind: litgpt\n  extra: {extra}\n"))
    return config


DUPLICATES = {   # trainer.extra -> the place named in the error
    "lr": ("{optimizer: {init_args: {lr: 10}}}", "trainer.extra.optimizer.init_args.lr"),
    "micro-batch": ("{train: {micro_batch_size: 8}}", "trainer.extra.train.micro_batch_size"),
    "optimizer replaced": ("{optimizer: AdamW}", "trainer.extra.optimizer"),
}


@pytest.mark.parametrize("case", list(DUPLICATES), ids=list(DUPLICATES))
@pytest.mark.parametrize("mode", ["litgpt_config", "generated"])
def test_a_managed_hyperparameter_in_trainer_extra_is_refused_with_file_line(tmp_path, case, mode):
    extra, place = DUPLICATES[case]
    config = (_litgpt_project if mode == "litgpt_config" else _generated_project)(tmp_path / "p", extra)
    with pytest.raises(SourceError) as err:
        load_config(config)
    line = next(n for n, text in enumerate(config.read_text().splitlines(), 1) if text.startswith("  extra:"))
    assert f"{config}:{line}:" in str(err.value) and f"{place}: " in str(err.value), str(err.value)
    assert "managed by runbook" in str(err.value)


@pytest.mark.parametrize("command", ["check", "watch"])
def test_check_and_watch_refuse_lr_in_trainer_extra_and_leave_the_litgpt_yaml_alone(tmp_path, command):
    config = _litgpt_project(tmp_path / "p", "{optimizer: {init_args: {lr: 10}}}")
    result = subprocess.run([RUNBOOK, command, str(config)], capture_output=True, text=True, timeout=120)
    assert result.returncode == ExitCode.BAD_CONFIG, result.stdout + result.stderr
    assert "trainer.extra.optimizer.init_args.lr: lr is managed by runbook" in result.stderr
    assert (tmp_path / "p" / "litgpt.yaml").read_text() == LITGPT
    assert not (tmp_path / "p" / "runs").exists()   # refused before anything ran


def test_extra_keys_runbook_does_not_manage_still_pass(tmp_path):
    config = _litgpt_project(tmp_path / "p", "{optimizer: {init_args: {weight_decay: 0.2}}, train: {min_lr: 1.0e-5}}")
    assert load_config(config).config.lr == 0.003


def test_a_write_back_changes_only_the_values_in_the_users_litgpt_yaml(tmp_path):
    config = _litgpt_project(tmp_path / "p")
    load_config(config).write_back({"lr": 0.0015, "micro_batch_size": 2})
    expected = LITGPT.replace("lr: 0.003", "lr: 0.0015").replace("micro_batch_size: 4", "micro_batch_size: 2")
    assert (tmp_path / "p" / "litgpt.yaml").read_text() == expected
    again = load_config(config).config
    assert (again.lr, again.micro_batch_size) == (0.0015, 2)


def test_a_write_back_of_a_small_lr_stays_a_float_for_yaml_1_1_readers(tmp_path):
    import yaml as pyyaml   # litgpt's jsonargparse reads YAML with PyYAML (1.1): `1e-05` would be a string

    config = _litgpt_project(tmp_path / "p")
    load_config(config).write_back({"lr": 1e-05})
    assert pyyaml.safe_load((tmp_path / "p" / "litgpt.yaml").read_text())["optimizer"]["init_args"]["lr"] == 1e-05


def test_each_launch_carries_the_run_configs_hyperparameters_as_litgpt_reads_them(tmp_path):
    config = _litgpt_project(tmp_path / "p")
    loaded = load_config(config).write_back({"lr": 0.0015})
    spec = adapter_for("litgpt").prepare_launch(loaded, tmp_path / "launch", None, "sha256:" + "0" * 64)
    assert spec.hyperparameters == {"micro_batch_size": 4, "batch_size": 16, "lr": 0.0015, "save_interval": 5,
                                    "max_tokens": 10240}


def test_a_launch_whose_trainer_config_would_not_carry_the_lr_is_refused(tmp_path):
    # The load refuses every way into trainer.extra we know of; this guard is for the ones we do not:
    # the fault is put into the loaded config in memory, past the loader, as an unknown path would.
    loaded = load_config(_generated_project(tmp_path / "p", "{}"))
    loaded.config.trainer.extra["optimizer"] = "AdamW"   # litgpt would train at AdamW's default lr
    with pytest.raises(HyperparametersNotReached, match=r"lr None \(run config: 0\.003\)"):
        adapter_for("litgpt").prepare_launch(loaded, tmp_path / "launch", None, "sha256:" + "0" * 64)
