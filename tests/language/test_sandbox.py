"""The expression/template sandbox holds: plain data only, bounded work, and read-only commands write nothing.

Every hostile input goes through the real CLI (typer's CliRunner, in process) and, for the ones that
used to hang, a real subprocess with a timeout. Each must end with one clear reason, its exit code,
no traceback, quickly, and without touching a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.expr.expressions import ExpressionError, compile_expression, render_template
from engine.core.state import StateSnapshot
from runbook.cli import app
from engine.core.config import RunConfig
from runbook.exit_codes import ExitCode

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = str(Path(sys.executable).parent / "runbook")
MARK = "/tmp/runbook-sandbox-pwned"   # what an escaped expression would create; the tests check it never does


def cli(*args: str):
    start = time.monotonic()
    result = CliRunner().invoke(app, list(args))
    assert time.monotonic() - start < 10, f"{args} took {time.monotonic() - start:.1f} s"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return result


def playbook(condition: str = "state.trainer.alive", note: str = "x", tests: bool = True) -> str:
    text = ("name: hostile\ndescription: x\nmatch:\n  all:\n    - stalled: {}\n"
            f"    - expr: {json.dumps(condition)}\nactions:\n  - record: {{note: {json.dumps(note)}}}\n")
    if tests:
        text += "tests:\n  - name: t\n    observations: [{seconds_since_progress: 999}]\n    expect_fires_at: null\n"
    return text


# Expressions that reach for files, processes or Python internals; each must be refused or undefined.
ESCAPES = [
    f"config.out_dir.joinpath('{MARK}').write_text('x') > 0",
    f"config.out_dir.joinpath('{MARK}').touch() is none",
    f"config.run_dir.joinpath('{MARK}').open('w') is none",
    "config.out_dir.joinpath('/etc/hostname').read_text() != ''",
    "config.out_dir.joinpath('/etc/hostname').unlink() is none",
    f"config.run_dir.parent.joinpath('{MARK}').mkdir() is none",
    "config.out_dir.resolve().exists()",
    "config.out_dir.iterdir() is none",
    "config.playbooks.paths[0].read_text() != ''",
    "config.data.train_dir.stat().st_size > 0",
    "config.run_log.read_bytes() != ''",
    "config.model_dump() != {}",
    "config.model_copy(update={'lr': 1}) is none",
    "state.model_dump_json() != ''",
    "state.metrics.loss_history.append(1) is none",
    "state.metrics.loss_history.clear() is none",
    "state.trainer.model_fields != {}",
    "(config|attr('model_dump'))() != {}",
    "(config.out_dir|attr('write_text'))('x') > 0",
    "(''|attr('__class__'))() is none",
    "().__class__.__base__ is none",
    "state.__dict__ is none",
    "config['_secret'] is none",
    "dict(a=1).update(b=2) is none",
    "'{0.__class__}'.format(config) != ''",
    "'{:>99999999}'.format(1) != ''",
    "self.blocks.clear() is none",
    "lipsum(100000) != ''",
    "cycler(1, 2).next() == 1",
    "namespace(a=1).a == 1",
    "range.__call__(3) is none",
    "config.trainer.env.setdefault('A', 'B') is none",
]

# Expressions that would allocate or compute without bound.
BUDGETS = [
    "9**(9**9) > 0",
    "2**100000 > 0",
    "'a' * 10**10 != ''",
    "[1] * 10**9 != []",
    "(10**1000) * (10**1000) > 0",
    "'%0999999999d' % 1 != ''",
    "'%*d' % (999999999, 1) != ''",
    "('%0999999999d'|format(1)) != ''",
    "('x' * 1000).replace('', 'y' * 1000) != ''",
    "('x' * 1000).replace('x', 'y' * 1000) != ''",
    "('a' * 99999) ~ ('b' * 99999) != ''",
    "('a' * 99999) + ('b' * 99999) != ''",
    "range(10**9)|list|length > 0",
    "(range(9999)|map('string')|join(','|string * 99999)) != ''",
    "not " * 5000 + "true",
    "(" * 3000 + "1" + ")" * 3000 + " == 1",
    "state.metrics.loss" + " + 1" * 5000 + " > 0",
]

TEMPLATES = [
    f"{{{{ config.out_dir.joinpath('{MARK}').touch() }}}}",
    f"{{{{ config.out_dir.joinpath('{MARK}').write_text('x') }}}}",
    "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "{% for i in range(9999) %}{% for j in range(9999) %}{% endfor %}{% endfor %}",
    "{% for i in range(9999) %}{% for j in range(9999) %}x{% endfor %}{% endfor %}",
    "{% for i in range(9999) %}{{ 'a' * 99 }}{% endfor %}",
    "{% set a = 'x' * 50000 %}{% set b = a ~ a %}{% set c = b ~ b %}{{ c }}",
    "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
    "{% include '/etc/hostname' %}",
    "{% extends '/etc/hostname' %}",
    "{% import '/etc/hostname' as h %}",
    "{{ self.__class__ }}",
    "{{ ''|attr('__class__') }}",
    "{{ lipsum(10**6) }}",
    "{{ 'x'|center(10**9) }}",
    "{{ 'x'|indent(10**9) }}",
    "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "{{ 9**(9**9) }}",
    "{{ '{:>999999999}'.format(1) }}",
]


def test_paths_reach_expressions_as_text_and_models_as_fields():
    context = {"state": StateSnapshot(), "config": RunConfig()}
    assert compile_expression("config.out_dir").evaluate(**context) == "checkpoints/pretrain"
    assert compile_expression("config.playbooks.paths").evaluate(**context) == ["playbooks"]
    assert compile_expression("config.out_dir ~ '/step'").evaluate(**context) == "checkpoints/pretrain/step"
    assert compile_expression("state.disk.free_percent").evaluate(**context) == 0.0
    assert compile_expression("state.run_state.value").evaluate(**context) == "running"
    assert render_template("{% for p in config.playbooks.paths %}{{ loop.index }}:{{ p|upper }}{% endfor %}", context) == "1:PLAYBOOKS"
    assert render_template("{{ a }} of {{ b }}", {"a": 1, "b": 2}) == "1 of 2"


@pytest.mark.parametrize("source", BUDGETS)
def test_budgets_fail_with_an_expression_error_naming_the_source(source):
    context = {"state": StateSnapshot(), "config": RunConfig()}
    start = time.monotonic()
    with pytest.raises(ExpressionError) as raised:
        compile_expression(source).evaluate(**context)
    assert time.monotonic() - start < 2
    assert source[:20] in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("source", ESCAPES + BUDGETS)
def test_lint_refuses_hostile_conditions_and_writes_nothing(tmp_path, source):
    (tmp_path / "p.yaml").write_text(playbook(condition=source))
    result = cli("playbooks", "lint", str(tmp_path))
    assert result.exit_code in (ExitCode.INVALID, ExitCode.OK), result.output
    if result.exit_code == ExitCode.OK:  # undefined on the samples: fails closed, with a warning
        assert "warning" in result.output, result.output
    assert not Path(MARK).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]


@pytest.mark.parametrize("source", ESCAPES[:12] + BUDGETS[:8])
def test_playbook_test_and_explain_fail_closed_on_hostile_conditions(tmp_path, source):
    (tmp_path / "p.yaml").write_text(playbook(condition=source))
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"seconds_since_progress": 999, "trainer": {"alive": True}}))
    assert cli("playbooks", "test", str(tmp_path)).exit_code in (ExitCode.OK, ExitCode.INVALID, ExitCode.BAD_CONFIG)
    explained = cli("playbooks", "explain", "hostile", "--state", str(state), "--playbooks", str(tmp_path))
    assert explained.exit_code in (ExitCode.NO_MATCH, ExitCode.BAD_CONFIG), explained.output
    assert not Path(MARK).exists()


@pytest.mark.parametrize("note", TEMPLATES)
def test_hostile_templates_are_refused_or_bounded(tmp_path, note):
    (tmp_path / "p.yaml").write_text(playbook(condition="true", note=note))
    result = cli("playbooks", "lint", str(tmp_path))
    assert result.exit_code in (ExitCode.INVALID, ExitCode.OK), result.output
    if result.exit_code == ExitCode.OK:
        assert "warning" in result.output, result.output
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"seconds_since_progress": 999, "trainer": {"alive": True}}))
    explained = cli("playbooks", "explain", "hostile", "--state", str(state), "--playbooks", str(tmp_path))
    assert explained.exit_code in (ExitCode.OK, ExitCode.BAD_CONFIG), explained.output
    assert not Path(MARK).exists()


def test_escape_through_the_real_command_in_a_subprocess(tmp_path):
    """QA's reproduction verbatim, as a real process with a timeout."""
    (tmp_path / "p.yaml").write_text(playbook(condition=f"config.out_dir.joinpath('{MARK}').write_text("
                                                        "config.out_dir.joinpath('/etc/hostname').read_text()) > 0"))
    done = subprocess.run([RUNBOOK, "playbooks", "lint", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == ExitCode.INVALID, done.stdout + done.stderr
    assert "joinpath" in done.stdout and "Traceback" not in done.stdout + done.stderr
    assert not Path(MARK).exists()


# --- read-only commands write nothing ------------------------------------------------------------
def _snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
            out[str(path.relative_to(root))] = (info.st_mtime_ns, info.st_mode, digest)
    return out


@pytest.mark.slow
def test_read_only_commands_write_nothing(tmp_path):
    """lint, test, explain, status, incidents and watch --dry-run against a project with a hostile playbook:
    not one file created, changed or removed, and no run folder made. (`report` writes its report by
    design, docs/run-log.md is written by watch: both are left out.)"""
    root = tmp_path / "project"
    (root / "configs").mkdir(parents=True)
    (root / "playbooks").mkdir()
    (root / "playbooks" / "hostile.yaml").write_text(playbook(
        condition=f"config.out_dir.joinpath('{MARK}').write_text('x') > 0",
        note=f"{{{{ config.out_dir.joinpath('{MARK}').touch() }}}}"))
    (root / "configs" / "run_config.yaml").write_text((REPO / "configs" / "run_config.yaml").read_text())  # playbooks: [playbooks]
    (root / "state.json").write_text(json.dumps({"seconds_since_progress": 999, "trainer": {"alive": True}}))
    for folder in ("train", "val"):  # data present: the dry run gets as far as observing
        (root / "data" / "stdlib" / folder).mkdir(parents=True)
        (root / "data" / "stdlib" / folder / "a.txt").write_text("hello\n")
    (root / "data" / "tokenizer").mkdir()
    (root / "data" / "tokenizer" / "tokenizer.json").write_text("{}")
    config = str(root / "configs" / "run_config.yaml")
    before = _snapshot(root)
    runs = [
        ("playbooks", "lint", str(root / "playbooks")),
        ("playbooks", "lint", "--config", config),
        ("playbooks", "test", str(root / "playbooks")),
        ("playbooks", "explain", "hostile", "--state", str(root / "state.json"), "--playbooks", str(root / "playbooks")),
        ("status", config),
        ("incidents", "--config", config),
    ]
    for args in runs:
        cli(*args)
    done = subprocess.run([RUNBOOK, "watch", config, "--dry-run"], capture_output=True, text=True, timeout=60, cwd=root)
    assert "Traceback" not in done.stdout + done.stderr
    assert _snapshot(root) == before
    assert not (root / "runs").exists() and not Path(MARK).exists()


def test_a_hostile_run_log_template_is_cut_off_by_the_sandbox_not_run(tmp_path):
    """run_log_template is the user's file too: it renders in the same sandbox, under the same budgets."""
    import time

    from engine.expr.expressions import ExpressionError
    from engine.records.run_log import render_entry

    record = {"id": "incident-1", "playbook": "preemption", "outcome": "recovered", "actions": []}
    cases = {
        "loops": "{% for a in range(9999) %}{% for b in range(9999) %}x{% endfor %}{% endfor %}",
        "a path method": "{{ incident.id.__class__.__mro__ }}",
        "huge power": "{{ 9 ** (9 ** 9) }}",
    }
    for name, text in cases.items():
        template = tmp_path / f"{name}.md.j2"
        template.write_text(text)
        started = time.monotonic()
        with pytest.raises(ExpressionError):
            render_entry(record, template)
        assert time.monotonic() - started < 3, name
