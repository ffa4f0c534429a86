"""`trainer.extra` reaches the trainer as plain data: every YAML scalar kind a user may write, through
the real run-config loader and the real litgpt adapter, read back by a YAML parser (PyYAML, which
litgpt's jsonargparse reads configs with); and one real `runbook watch` of litgpt with it set.

ruamel's round-trip loader returns its own types (ScalarFloat, HexInt, DoubleQuotedScalarString, ...):
before engine/core/yaml_source.py's `plain` converted them, the litgpt config writer refused them and the
watcher died with `RepresenterError: cannot represent an object: 0.1` before any trainer started.
"""

from __future__ import annotations

import datetime as dt
import subprocess

import pytest
import yaml

from engine.trainers.run_config import load_config
from engine.trainers import adapter_for
from tests.conftest import REPO, RUNBOOK


# (what the user writes under trainer.extra, where it lands in the litgpt config, the exact value)
CASES = {
    "float": ("optimizer: {init_args: {weight_decay: 0.1}}", ("optimizer", "init_args", "weight_decay"), 0.1),
    "float in a model": ("model_config: {rotary_percentage: 0.25}", ("model_config", "rotary_percentage"), 0.25),
    "exponent float": ("train: {min_lr: 1.0e-5}", ("train", "min_lr"), 1e-5),
    "exponent float without a dot": ("train: {min_lr: 3e-6}", ("train", "min_lr"), 3e-6),   # YAML 1.2 only
    "double-quoted string": ('precision: "bf16-true"', ("precision",), "bf16-true"),
    "single-quoted string": ("logger_name: 'tensorboard'", ("logger_name",), "tensorboard"),
    "plain string": ("data: {init_args: {note: hello}}", ("data", "init_args", "note"), "hello"),
    "quoted yes stays a string": ("data: {init_args: {note: 'yes'}}", ("data", "init_args", "note"), "yes"),
    "quoted number stays a string": ("seed_text: '42'", ("seed_text",), "42"),
    "hex int": ("train: {log_interval: 0x10}", ("train", "log_interval"), 16),
    "octal int": ("num_nodes: 0o2", ("num_nodes",), 2),
    "underscored int": ("train: {max_norm: 1_024_000}", ("train", "max_norm"), 1_024_000),   # max_tokens is runbook's own (issue 34: refused in extra)
    "int": ("devices: 2", ("devices",), 2),
    "null": ("resume: null", ("resume",), None),
    "tilde null": ("train: {max_steps: ~}", ("train", "max_steps"), None),
    "boolean": ("eval: {initial_validation: true}", ("eval", "initial_validation"), True),
    "false": ("eval: {final_validation: false}", ("eval", "final_validation"), False),
    "list of floats": ("optimizer: {init_args: {betas: [0.8, 0.99]}}", ("optimizer", "init_args", "betas"), [0.8, 0.99]),
    "nested list and map": ("callbacks: [{name: a, every: 0x2, ratio: 0.5}, [1, '2', null]]", ("callbacks",),
                            [{"name": "a", "every": 2, "ratio": 0.5}, [1, "2", None]]),
    "anchored float and bool": ("train: {max_norm: &n 0.5, lr_warmup_fraction: *n}\neval: {initial_validation: &t true, "
                                "final_validation: *t}", ("eval", "final_validation"), True),
    "date": ("started: 2026-11-30", ("started",), dt.date(2026, 11, 30)),
}


def _same(got, expected) -> bool:
    """Equal and of exactly the same types, all the way down (1 == 1.0 == True in Python)."""
    if type(got) is not type(expected):
        return False
    if isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_same(got[k], v) for k, v in expected.items())
    if isinstance(expected, list):
        return len(got) == len(expected) and all(_same(g, e) for g, e in zip(got, expected))
    return got == expected


def _with_extra(root, extra_yaml: str):
    (root / "configs").mkdir(parents=True)
    text = (REPO / "configs" / "run_config.yaml").read_text()
    indented = "".join(f"    {line}\n" for line in extra_yaml.splitlines())
    assert "trainer:\n  kind: litgpt\n" in text
    text = text.replace("trainer:\n  kind: litgpt\n", "trainer:\n  kind: litgpt\n  extra:\n" + indented)
    (root / "configs" / "run_config.yaml").write_text(text)
    return root / "configs" / "run_config.yaml"


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_each_scalar_kind_in_trainer_extra_reaches_the_litgpt_config_as_plain_data(tmp_path, case):
    extra_yaml, where, expected = CASES[case]
    loaded = load_config(_with_extra(tmp_path / "project", extra_yaml))
    spec = adapter_for("litgpt").prepare_launch(loaded, tmp_path / "launch", None, "sha256:" + "0" * 64)
    written = yaml.safe_load(spec.config_file.read_text())
    got = written
    for key in where:
        got = got[key]
    assert _same(got, expected), (got, expected)
    assert written["optimizer"]["init_args"]["lr"] == loaded.config.lr   # merged into runbook's values, not over them
    assert written["model_config"]["n_layer"] == loaded.config.model.n_layer


def test_a_real_litgpt_run_with_weight_decay_in_trainer_extra_completes(litgpt_project):
    project = litgpt_project
    # The report's example: `trainer.extra: {optimizer: {init_args: {weight_decay: 0.1}}}` (plus a quoted string).
    project.set(max_tokens=4 * 16 * 64, save_interval=2,
                trainer={"extra": yaml.safe_load('{optimizer: {init_args: {weight_decay: 0.1}}}')})
    text = project.config.read_text().replace("precision: 32-true", 'precision: "32-true"')
    project.config.write_text(text)
    result = subprocess.run([RUNBOOK, "watch", str(project.config)], capture_output=True, text=True, timeout=400,
                            cwd=project.root)
    assert result.returncode == 0, result.stdout + result.stderr
    [launch] = sorted((project.run_dir / "launches").iterdir())
    written = yaml.safe_load((launch / "litgpt_pretrain.yaml").read_text())
    assert written["optimizer"]["init_args"]["weight_decay"] == 0.1 and written["precision"] == "32-true"
    assert (project.out_dir / "final" / "lit_model.pth").is_file()
