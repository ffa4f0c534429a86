"""Hostile files and values: each refused with one sentence and its exit code, quickly, never a traceback.

Billion-laughs YAML, deep nesting, bytes that are not UTF-8 text, paths that are not regular files,
huge numbers, backtracking regexes; then a hypothesis fuzz over generated playbook YAML. Run more
examples with HYPOTHESIS_PROFILE=long (see tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

from runbook.cli import app
from runbook.exit_codes import ExitCode

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = str(Path(sys.executable).parent / "runbook")
GOOD = "name: good\ndescription: x\nmatch:\n  stalled: {}\nactions:\n  - stop: {}\n"
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def cli(*args: str):
    start = time.monotonic()
    result = CliRunner().invoke(app, list(args))
    assert time.monotonic() - start < 10, f"{args} took {time.monotonic() - start:.1f} s"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return result


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    done = subprocess.run([RUNBOOK, *args], capture_output=True, text=True, timeout=timeout, errors="replace")
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


# playbook text -> (exit code of `playbooks lint`, a piece of the one-line reason)
PLAYBOOKS = {
    "laughs": (LAUGHS, "aliases expand"),
    "laughs_in_playbook": ("name: good\n" + LAUGHS, "aliases expand"),
    "deep_flow": ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nested more than"),
    "deep_block": ("".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n", "nested more than"),
    "nul": (GOOD.replace("x\n", "x\x00\n", 1), "NUL byte"),
    "latin1": (GOOD.replace("description: x", "description: caf\xe9"), None),  # written as Latin-1 below
    "many_nots": (GOOD.replace("stalled: {}", "expr: '" + "not " * 5000 + "true'"), "longer than"),
    "deep_parens": (GOOD.replace("stalled: {}", "expr: '" + "(" * 3000 + "true" + ")" * 3000 + "'"), "nested"),
    "duration_400_digits": (GOOD + "for: {seconds: " + "9" * 400 + "}\n", "duration"),
    "priority_400_digits": (GOOD + "priority: " + "9" * 400 + "\n", "priority"),
    "backoff_huge": (GOOD + "limits: {cooldown: 1e-300, backoff: 1e103}\n", "backoff"),
    "backoff_inf": (GOOD + "limits: {backoff: .inf}\n", "backoff"),
    "window_inf": (GOOD + "limits: {window: .inf}\n", "window"),
    "window_string_huge": (GOOD + "limits: {window: '" + "9" * 400 + "s'}\n", "window"),
    "attempts_huge": (GOOD + "limits: {max_attempts: " + "9" * 30 + "}\n", "max_attempts"),
    "resume_from_step_without_step": (GOOD.replace("stop: {}", "resume: {from: step}"), "needs `step`"),
    "self_inhibit": (GOOD + "inhibits: [good]\n", "cannot inhibit itself"),
    "backref_regex": (GOOD.replace("stalled: {}", "log: {pattern: '(a)\\1'}"), "RE2"),
    "lookahead_regex": (GOOD.replace("stalled: {}", "log: {pattern: 'a(?=b)'}"), "RE2"),
    "regex_huge": (GOOD.replace("stalled: {}", "log: {pattern: '" + "a" * 3000 + "'}"), "longer than"),
    "expr_huge_int": (GOOD.replace("stalled: {}", "expr: '9**(9**9) > 0'"), "sandbox's limits"),
    "expr_huge_str": (GOOD.replace("stalled: {}", "expr: \"'a' * 10**10 != ''\""), "sandbox's limits"),
    "note_nested_ranges": (GOOD.replace("stop: {}", "record: {note: '{% for i in range(99999) %}{% for j in range(99999) %}x{% endfor %}{% endfor %}'}"), "sandbox's limits"),
    "not_a_mapping": ("- a\n- b\n", "one mapping"),
    "empty": ("", "one mapping"),
    "bad_yaml": ("a: [\n", "invalid YAML"),
    "timestamp": (GOOD + "lesson: 2001-13-45\n", None),
}


RUNTIME = {"expr_huge_int", "expr_huge_str", "note_nested_ranges"}


@pytest.mark.parametrize("name", sorted(PLAYBOOKS))
def test_hostile_playbook_files_are_refused_in_one_line(tmp_path, name):
    text, reason = PLAYBOOKS[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(text.encode("latin-1" if name == "latin1" else "utf-8"))
    lint = cli("playbooks", "lint", str(tmp_path))
    if reason is None and name == "timestamp":
        assert lint.exit_code in (ExitCode.OK, ExitCode.INVALID)
        return
    assert lint.exit_code == ExitCode.INVALID, lint.output
    assert (reason or "not UTF-8") in lint.output
    assert all(len(line) < 600 for line in lint.output.splitlines())
    if name in RUNTIME:  # loads; refused when lint evaluates it on its sample states
        return
    loaded = cli("playbooks", "test", str(tmp_path))   # the loader watch uses; `test` exits 8 on invalid playbooks
    assert loaded.exit_code == ExitCode.INVALID and (reason or "not UTF-8") in loaded.output, loaded.output


def test_inhibit_cycle_is_refused_by_lint_and_loader(tmp_path):
    for a, b in (("one", "two"), ("two", "three"), ("three", "one")):
        (tmp_path / f"{a}.yaml").write_text(GOOD.replace("name: good", f"name: {a}") + f"inhibits: [{b}]\n")
    lint = cli("playbooks", "lint", str(tmp_path))
    assert lint.exit_code == ExitCode.INVALID and "one -> two -> three -> one" in lint.output
    assert cli("playbooks", "test", str(tmp_path)).exit_code == ExitCode.INVALID


def test_backtracking_pattern_is_linear(tmp_path):
    (tmp_path / "p.yaml").write_text(
        "name: bt\ndescription: x\nmatch:\n  log: {pattern: '^(a+)+$', scope: tail}\nactions:\n  - stop: {}\n"
        "tests:\n  - name: t\n    observations: [{tail: ['" + "a" * 45 + "b', '" + "a" * 100000 + "!']}]\n"
        "    expect_fires_at: null\n")
    assert cli("playbooks", "lint", str(tmp_path)).exit_code == ExitCode.OK
    assert cli("playbooks", "test", str(tmp_path)).exit_code == ExitCode.OK
    state = tmp_path / "s.json"
    state.write_text(json.dumps({"tail": ["a" * 45 + "b"] * 50}))
    assert cli("playbooks", "explain", "bt", "--state", str(state), "--playbooks", str(tmp_path)).exit_code == ExitCode.NO_MATCH


def _config(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "configs").mkdir(exist_ok=True)
    path = tmp_path / "configs" / "run_config.yaml"
    path.write_text((REPO / "configs" / "run_config.yaml").read_text() + extra)
    return path


CONFIGS = {
    "lr_inf": ("lr: .inf\n", "lr"),
    "lr_nan": ("lr: .nan\n", "lr"),
    "max_tokens_one": ("max_tokens: 1\n", "0 steps"),
    "laughs": (LAUGHS, "aliases expand"),
    "unknown_key": ("colour: red\n", "unknown key"),
    "huge_int": ("seed: " + "9" * 5000 + "\n", None),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_hostile_config_values(tmp_path, name):
    extra, reason = CONFIGS[name]
    config = _config(tmp_path)
    key = extra.split(":")[0] + ":"  # the repo config may set this key: drop its line so ours is the only one
    config.write_text("\n".join(l for l in config.read_text().splitlines() if not l.startswith(key)) + "\n" + extra)
    result = cli("playbooks", "lint", "--config", str(config))
    assert result.exit_code == ExitCode.BAD_CONFIG, result.output
    if reason:
        assert reason in result.output


def _special_paths(tmp_path: Path) -> dict[str, str]:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "folder.yaml").mkdir()
    return {"fifo": str(fifo), "device": "/dev/zero", "folder": str(tmp_path / "folder.yaml"),
            "symlink_loop": str(tmp_path / "loop1"), "long": "/tmp/" + "x" * 5000,
            "missing": str(tmp_path / "nope.yaml")}


@pytest.mark.slow
def test_config_paths_that_are_not_files(tmp_path):
    """One subprocess per path: a FIFO or /dev/zero used to hang; now each is one sentence, exit 3."""
    for name, path in _special_paths(tmp_path).items():
        start = time.monotonic()
        done = run("status", path)
        assert done.returncode == ExitCode.BAD_CONFIG, (name, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (name, done.stderr)
        assert time.monotonic() - start < 20
    done = subprocess.run([RUNBOOK, "status", os.fsencode(str(tmp_path)) + b"/caf\xe9.yaml"], capture_output=True, timeout=30)
    assert done.returncode == ExitCode.BAD_CONFIG and b"Traceback" not in done.stderr


def test_config_path_with_nul_and_playbook_paths(tmp_path):
    assert cli("playbooks", "lint", "--config", "a\x00b").exit_code == ExitCode.USAGE  # typer refuses it itself
    config = _config(tmp_path)
    config.write_text("\n".join(l for l in config.read_text().splitlines() if not l.startswith(("playbooks:", "  paths:")))
                      + '\nplaybooks: {paths: ["a\\0b"]}\n')
    nul_in_config = cli("playbooks", "lint", "--config", str(config))
    assert nul_in_config.exit_code == ExitCode.BAD_CONFIG and "NUL" in nul_in_config.output, nul_in_config.output
    specials = _special_paths(tmp_path)
    for name in ("fifo", "symlink_loop", "long", "missing"):  # a folder is a folder of playbooks
        assert cli("playbooks", "test", specials[name]).exit_code == ExitCode.INVALID, name
    assert cli("playbooks", "lint", "a\x00b").exit_code == ExitCode.USAGE  # typer refuses it itself


@pytest.mark.slow
def test_state_files_that_are_not_files(tmp_path):
    (tmp_path / "p.yaml").write_text(GOOD)
    specials = _special_paths(tmp_path)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    for state in (specials["device"], specials["fifo"], specials["folder"], str(deep)):
        done = run("playbooks", "explain", "good", "--state", state, "--playbooks", str(tmp_path / "p.yaml"))
        assert done.returncode == ExitCode.NOT_FOUND, (state, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# --- fuzz -------------------------------------------------------------------------------------------
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10 ** 400), max_value=10 ** 400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.sampled_from(["{{ 9**(9**9) }}", "{{ 'a' * 10**10 }}", "{{ config.out_dir.joinpath('x').touch() }}",
                     "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
                     "^(a+)+$", "30s", "9" * 400 + "h", "{{ a }} of {{ b }}", "\u202e\u0000", "{{ ().__class__ }}"]),
)
_keys = st.sampled_from(["name", "description", "match", "actions", "limits", "for", "priority", "inhibits", "tests",
                         "log", "expr", "pattern", "stalled", "stop", "record", "note", "resume", "from", "step",
                         "backoff", "cooldown", "window", "all", "any", "not", "metric", "op", "colour", "\u00e9"])
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(_keys, inner, max_size=5)), max_leaves=25)
_playbooks = st.fixed_dictionaries(
    {"name": st.one_of(st.just("fuzz"), st.text(max_size=10)), "description": _values,
     "match": st.one_of(st.just({"stalled": {}}), st.dictionaries(_keys, _values, max_size=3)),
     "actions": st.one_of(st.just([{"stop": {}}]), st.lists(st.dictionaries(_keys, _values, max_size=2), max_size=3))},
    optional={"limits": _values, "for": _values, "priority": _values, "inhibits": _values, "tests": _values},
)


@pytest.mark.slow
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(document=_playbooks)
def test_fuzzed_playbooks_never_crash(tmp_path, document):
    path = tmp_path / "fuzz.yaml"
    path.write_text(json.dumps(document))  # JSON is YAML: every generated document is valid YAML
    start = time.monotonic()
    for args in (("playbooks", "lint", str(path)), ("playbooks", "test", str(path))):
        result = CliRunner().invoke(app, list(args))
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert result.exit_code in (ExitCode.OK, ExitCode.BAD_CONFIG, ExitCode.INVALID), result.output
        assert "Traceback" not in result.output
    assert time.monotonic() - start < 10
