"""The core speaks no trainer (issue 36): `trainer:` is validated by the settings model of its kind,
which the trainer's own package supplies (engine/trainers/registry.py), nothing under engine/core,
engine/records, engine/language names litgpt, and the core imports without torch, litgpt or litdata
(they are the `litgpt` extra)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.core.config import RunConfig, TrainerSettings, run_config_type
from engine.core.yaml_source import SourceError
from engine.trainers import registry
from engine.trainers.litgpt.settings import LitGPTSettings, ModelShape
from engine.trainers.run_config import load_config, run_config_of
from tests.conftest import REPO

NEUTRAL = ("engine/core", "engine/records", "engine/language")

# Files outside engine/trainers/litgpt/ that may say "litgpt", each for its reason. Everything else
# in engine/ must not: a new mention is either litgpt's code (it belongs in engine/trainers/litgpt/)
# or a comment that should speak of "the trainer".
ALLOWED_MENTIONS = {
    "engine/trainers/registry.py": "the registry names the default trainer and where its adapter and settings live",
    "engine/trainers/base.py": "the adapter interface's docstring gives litgpt's tokenized cache as the example",
    "engine/trainers/run_config.py": "its docstring says which trainer owns a config file of its own (litgpt's YAML)",
    "engine/trainers/preflight.py": "a docstring names litgpt's YAML as the file a trainer may own keys in",
    "engine/watch/startup.py": "a docstring's measured cost of litgpt's preflight parse (4-7 s)",
    "engine/process/warm_spare.py": "the measured import costs of torch, lightning and litgpt that a spare saves",
    "engine/process/trainer_env.py": "comments on what litgpt's data loader workers did (the AF_UNIX path limit)",
    "engine/observe/activity.py": "a comment on litgpt's data loader threads polling in a deadlock",
    "engine/observe/observer.py": "a comment on which weights litgpt's validation reads",
    "engine/observe/events.py": "the events' fields are named after litgpt's (iter_num, `Validating ...`)",
    "engine/datascan/files.py": "what litgpt's TextFiles reads, the rule the scan follows",
    "engine/checkpoints/partial_saves.py": "litgpt's save renames a temporary file: the partial saves it leaves",
    "engine/checkpoints/store.py": "litgpt's `--resume auto`, the example of a trainer searching out_dir",
    "engine/checkpoints/manifest.py": "litgpt's zip checks, the example of a layout's own check of its format",
    "engine/cluster/slurm.py": "points at the one multi-node launch there is (engine/trainers/litgpt/nodes.py)",
    "engine/process/host_records.py": "points at the per-host agent that writes these records (litgpt's host_agent.py)",
    "engine/process/nodes.py": "points at the node group that writes node-<n>.json (litgpt's nodes.py)",
}


def _mentions(path: Path) -> list[str]:
    return [f"{path.relative_to(REPO)}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
            if "litgpt" in line.lower()]


def test_nothing_in_the_core_records_or_language_names_litgpt():
    found = [hit for folder in NEUTRAL for path in sorted((REPO / folder).rglob("*.py")) for hit in _mentions(path)]
    assert found == []


def test_engine_outside_the_litgpt_package_names_it_only_where_the_reason_is_written_down():
    litgpt_room = REPO / "engine" / "trainers" / "litgpt"
    unexplained = [hit for path in sorted((REPO / "engine").rglob("*.py"))
                   if litgpt_room not in path.parents and str(path.relative_to(REPO)) not in ALLOWED_MENTIONS
                   for hit in _mentions(path)]
    assert unexplained == [], "say 'the trainer', or move the code into engine/trainers/litgpt/"
    stale = [name for name in ALLOWED_MENTIONS if not _mentions(REPO / name)]
    assert stale == [], "these no longer name litgpt: drop them from ALLOWED_MENTIONS"


def test_the_saved_on_notice_exit_code_is_one_named_constant():
    """75 (saved on a notice) is engine/core/exit_codes.SAVED_ON_NOTICE; a bare 75 elsewhere in engine/ is
    a second definition that a trainer with another code would have to find."""
    bare = [f"{path.relative_to(REPO)}:{node.lineno}" for path in sorted((REPO / "engine").rglob("*.py"))
            if path != REPO / "engine" / "core" / "exit_codes.py"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and type(node.value) is int and node.value == 75]
    assert bare == []


BLOCKED = ("torch", "litgpt", "litdata", "lightning")
IMPORT_ALL = textwrap.dedent("""
    import importlib, importlib.abc, json, sys
    BLOCKED = set(sys.argv[1].split(","))
    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is not installed (blocked by the test)")
    sys.meta_path.insert(0, Blocker())
    failed = {}
    for name in sys.argv[3:]:
        try:
            importlib.import_module(name)
        except Exception as error:   # noqa: BLE001 - every failure is reported
            failed[name] = f"{type(error).__name__}: {error}"
    from engine.trainers.run_config import load_config
    loaded = load_config(sys.argv[2])   # the shipped litgpt config: its settings model needs no litgpt
    print(json.dumps({"failed": failed, "kind": loaded.config.trainer.kind,
                      "loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)}))
""")


def test_the_core_imports_and_loads_a_run_config_without_torch_litgpt_or_litdata():
    modules = []
    for folder in (*NEUTRAL, "engine/watch"):
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert len(modules) > 60   # the walk found the packages
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL, ",".join(BLOCKED), str(REPO / "configs" / "run_config.yaml"),
                           *modules], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"failed": {}, "kind": "litgpt", "loaded": []}


def _config(tmp_path: Path, trainer: str, model: str = "") -> Path:
    path = tmp_path / "configs" / "run_config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(f"lr: 0.003\n{model}trainer:\n{trainer}")
    return path


def test_the_run_config_of_a_kind_is_validated_by_that_trainers_settings_model(tmp_path):
    loaded = load_config(_config(tmp_path, "  min_lr: 0.0002\n", "model:\n  n_layer: 3\n"))
    assert type(loaded.config.trainer) is LitGPTSettings and loaded.config.trainer.kind == "litgpt"   # no kind: the default
    assert type(loaded.config.model) is ModelShape and loaded.config.model.n_layer == 3
    assert loaded.config.trainer.min_lr == 0.0002
    assert "min_lr" not in TrainerSettings.model_fields and "n_layer" not in RunConfig.model_fields["model"].annotation.model_fields
    assert run_config_type(LitGPTSettings) is type(loaded.config)   # one class per settings model


def test_a_litgpt_key_under_a_trainer_without_it_is_an_unknown_key_with_file_line(tmp_path):
    """Before issue 36 every trainer accepted litgpt's precision, min_lr, eval_* and model shape."""
    registry.register_trainer("neutral-test", "tests.toy_trainer.adapter:ToyAdapter", settings=TrainerSettings)
    try:
        config = _config(tmp_path, "  kind: neutral-test\n  precision: bf16-true\n", "model:\n  n_layer: 3\n")
        with pytest.raises(SourceError) as error:
            load_config(config)
        assert str(error.value).splitlines() == [f"{config}:3:3: model.n_layer: unknown key",
                                                 f"{config}:6:3: trainer.precision: unknown key"]
    finally:
        registry._registered.pop("neutral-test")
        registry._settings.pop("neutral-test")


def test_an_unknown_kind_is_one_error_at_its_line(tmp_path):
    config = _config(tmp_path, "  kind: tensorflow\n  precision: bf16-true\n")
    with pytest.raises(SourceError) as error:
        load_config(config)
    assert str(error.value).splitlines() == [
        f"{config}:3:3: trainer.kind: unknown trainer kind 'tensorflow': use one of "
        f"{', '.join(registry.known_kinds())}, or python:<module>:<adapter class>"]


def test_a_settings_model_that_is_not_trainer_settings_is_refused_by_name(tmp_path):
    registry.register_trainer("bad-settings", "tests.toy_trainer.adapter:ToyAdapter", settings=dict)
    try:
        with pytest.raises(SourceError, match="trainer.kind: trainer kind 'bad-settings': its settings model .*dict.* "
                                              "is not a TrainerSettings"):
            load_config(_config(tmp_path, "  kind: bad-settings\n"))
    finally:
        registry._registered.pop("bad-settings")
        registry._settings.pop("bad-settings")


def test_a_records_config_is_validated_by_its_trainers_model_and_the_core_default_is_the_default_trainer():
    recorded = {**RunConfig().model_dump(mode="json"), "trainer": {"kind": "litgpt", "precision": "bf16-true"},
                "model": {"block_size": 64, "n_layer": 4}}
    config = run_config_of(recorded)
    assert config.trainer.precision == "bf16-true" and config.model.n_layer == 4
    assert run_config_of(RunConfig().model_dump()).trainer.kind == registry.DEFAULT_TRAINER_KIND
    assert registry.adapter_factory(RunConfig().trainer.kind) is registry.adapter_factory("litgpt")


def test_a_drills_trainer_keys_apply_only_to_a_trainer_that_has_them():
    """The slow drill spaces litgpt's validations out (eval_interval); under a trainer without that key
    the drill's scratch config must still load, so the key is left out rather than refused."""
    from engine.watch.faults import FAULTS, config_for

    assert config_for(FAULTS["slow"].config, LitGPTSettings)["trainer"] == {"eval_interval": 100}
    assert config_for(FAULTS["slow"].config, TrainerSettings)["trainer"] == {}
    assert config_for(FAULTS["oom"].config, TrainerSettings)["trainer"] == {"memory_limit_mb": 1300, "device": "cpu"}
    assert config_for(FAULTS["nan"].config, TrainerSettings) == {"lr": 10.0}
