"""engine.core.merge.deep_merge: the one recursive dict merge, and the places that layer settings with it."""

from __future__ import annotations

import copy

from engine.core.merge import deep_merge
from tests.conftest import REPO


def test_mappings_merge_key_by_key_and_everything_else_is_replaced():
    base = {"train": {"lr": 1e-3, "betas": [0.9, 0.95], "sched": {"warmup": 10, "kind": "cosine"}}, "seed": 1}
    updates = {"train": {"betas": [0.8], "sched": {"warmup": 0}}, "seed": None, "new": {"a": 1}}
    assert deep_merge(base, updates) == {
        "train": {"lr": 1e-3, "betas": [0.8], "sched": {"warmup": 0, "kind": "cosine"}},
        "seed": None, "new": {"a": 1},
    }


def test_a_mapping_replaces_a_scalar_and_a_scalar_replaces_a_mapping():
    assert deep_merge({"a": 1, "b": {"x": 1}}, {"a": {"y": 2}, "b": 3}) == {"a": {"y": 2}, "b": 3}


def test_neither_argument_is_changed():
    base = {"a": {"b": {"c": 1}}, "keep": [1]}
    updates = {"a": {"b": {"d": 2}}}
    before_base, before_updates = copy.deepcopy(base), copy.deepcopy(updates)
    merged = deep_merge(base, updates)
    assert merged["a"]["b"] == {"c": 1, "d": 2}
    assert base == before_base and updates == before_updates


def test_empty_updates_give_an_equal_new_dict():
    base = {"a": {"b": 1}}
    merged = deep_merge(base, {})
    assert merged == base and merged is not base


def shipped_config(tmp_path):
    from engine.trainers.run_config import load_config

    path = tmp_path / "proj" / "configs" / "run_config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text((REPO / "configs" / "run_config.yaml").read_text())
    return load_config(path)


def test_a_trainer_extra_section_merges_into_the_generated_litgpt_config(tmp_path):
    from engine.trainers.litgpt.adapter import LitGPTAdapter

    loaded = shipped_config(tmp_path).write_back({"trainer": {"extra": {"train": {"log_interval": 7}, "num_nodes": 2}}})
    generated = LitGPTAdapter().trainer_config(loaded, tmp_path, tmp_path, None)
    assert generated["train"]["log_interval"] == 7 and generated["num_nodes"] == 2
    assert generated["train"]["min_lr"] == loaded.config.trainer.min_lr   # the rest of the section stays


def test_a_drill_fault_config_merges_into_the_scratch_project_config(tmp_path):
    from types import SimpleNamespace

    from engine.trainers.run_config import load_config
    from runbook.commands.drill_cmd import make_scratch_project

    loaded = shipped_config(tmp_path)
    fault = SimpleNamespace(config={"watch": {"hang_timeout_s": 4}, "lr": 0.5})
    scratch = load_config(make_scratch_project(loaded, fault, tmp_path / "scratch"))
    assert scratch.config.watch.hang_timeout_s == 4 and scratch.config.lr == 0.5
    assert scratch.config.watch.poll_interval_s == loaded.config.watch.poll_interval_s   # merged, not replaced
