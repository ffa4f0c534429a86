"""Fuzzed run configs: generated from the shipped configs/run_config.yaml by setting random keys (known
and unknown, at any depth) to hostile values (wrong types, huge and non-finite numbers, unicode,
deep nesting, templates that try the sandbox). Loading one either succeeds or fails with
SourceError lines that each name file:line; never another exception. A sample also goes through
the CLI (`runbook status`): one sentence and exit 3, never a traceback.

`HYPOTHESIS_PROFILE=long` tries 3,000 configs instead of 60 (tests/conftest.py).
"""

from __future__ import annotations

import pytest

import io
import re
import subprocess

from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from engine.core.env_names import env_problem
from engine.trainers.run_config import load_config
from engine.core.yaml_source import SourceError
from tests.conftest import REPO, RUNBOOK

SHIPPED = YAML(typ="safe", pure=True).load((REPO / "configs" / "run_config.yaml").read_text())
LOCATED = re.compile(r"^\S.*:\d+(:\d+)?: ")   # file:line(:col): message

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10 ** 400), max_value=10 ** 400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.sampled_from(["{{ config.out_dir.joinpath('/tmp/x').touch() }}", "{{ 9**(9**9) }}", "/", ".", "/tmp",
                     "\u202e\u0000", "💥" * 50, "1e308", "-0", "NaN", "step-00000001"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)


def key_paths(tree, prefix=()):
    for key, value in tree.items():
        yield (*prefix, key)
        if isinstance(value, dict):
            yield from key_paths(value, (*prefix, key))


KNOWN = list(key_paths(SHIPPED))
paths = st.one_of(st.sampled_from(KNOWN),
                  st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=3).map(tuple))   # unknown keys


def mutate(tree: dict, changes: list) -> dict:
    import copy

    out = copy.deepcopy(tree)
    for path, value in changes:
        node = out
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[path[-1]] = value
    return out


def dump(tree: dict) -> str:
    buffer = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.width = 4096
    yaml.dump(tree, buffer)
    return buffer.getvalue()


@pytest.mark.slow
@given(changes=st.lists(st.tuples(paths, values), min_size=1, max_size=4))
def test_a_generated_run_config_loads_or_says_where_it_is_wrong(tmp_path_factory, changes):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "configs").mkdir()
    config = root / "configs" / "run_config.yaml"
    try:
        config.write_text(dump(mutate(SHIPPED, changes)))
    except (UnicodeEncodeError, ValueError):   # not representable as YAML text at all: nothing to load
        return
    try:
        load_config(config)
    except SourceError as error:
        assert error.messages and all(LOCATED.match(m) or m.startswith(str(config)) for m in error.messages), error.messages


@pytest.mark.slow
def test_hostile_configs_through_the_cli_are_one_sentence_and_exit_3(tmp_path):
    cases = {
        "wrong type deep": {"trainer": {"devices": {"a": [1, 2]}}},
        "400-digit int": {"max_tokens": 10 ** 400},
        "unknown key": {"surprise": {"deeper": 1}},
        "template in a path": {"out_dir": "{{ config.out_dir.joinpath('/tmp/x').touch() }}"},
        "non-finite lr": {"lr": float("inf")},
        "list for a section": {"watch": [1, 2, 3]},
    }
    for name, change in cases.items():
        root = tmp_path / name.replace(" ", "-")
        (root / "configs").mkdir(parents=True)
        config = root / "configs" / "run_config.yaml"
        config.write_text(dump(mutate(SHIPPED, [((k,), v) for k, v in change.items()])))
        result = subprocess.run([RUNBOOK, "status", str(config)], capture_output=True, text=True, timeout=60,
                                cwd=root)
        assert result.returncode == 3, (name, result.returncode, result.stderr)
        assert "Traceback" not in result.stderr + result.stdout, (name, result.stderr)
        assert str(config) in result.stderr, (name, result.stderr)


# Issue 26 items 4 and 6: environment names and values, run_log/run_log_template/quarantine_dir paths.
ENV_NAMES = st.one_of(st.text(max_size=12), st.sampled_from(["", "1A", "A=B", "A B", "A.B", "A\x00", "NCCL_DEBUG", "_ok"]))
HOSTILE_PATHS = st.sampled_from(["/", ".", "configs", "configs/run_config.yaml", "runs/pretrain/journal.jsonl",
                                 "checkpoints/pretrain", "checkpoints/pretrain/step-00000001/lit_model.pth",
                                 "data/stdlib/train/a.txt", "data", "/dev/zero", "/dev/null", "/proc/self/mem",
                                 "docs/run-log.md", "runs/q", "../outside", "~", "\u202e", "x" * 300])


@given(env=st.dictionaries(ENV_NAMES, st.one_of(st.text(max_size=20), st.just("a\x00b")), max_size=3),
       files=st.lists(st.tuples(st.sampled_from([("run_log",), ("run_log_template",), ("watch", "quarantine_dir")]),
                                HOSTILE_PATHS), max_size=3))
def test_generated_env_and_run_log_paths_load_or_say_where(tmp_path_factory, env, files):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "configs").mkdir()
    config = root / "configs" / "run_config.yaml"
    try:
        config.write_text(dump(mutate(SHIPPED, [(("trainer", "env"), env), *files])))
    except (UnicodeEncodeError, ValueError):
        return
    try:
        loaded = load_config(config)
    except SourceError as error:
        assert error.messages and all(LOCATED.match(m) or m.startswith(str(config)) for m in error.messages), error.messages
        return
    assert not any(env_problem(k, v) for k, v in loaded.config.trainer.env.items())
    assert not str(loaded.run_log).startswith("/dev") and not str(loaded.quarantine_dir) in ("/", str(root))
