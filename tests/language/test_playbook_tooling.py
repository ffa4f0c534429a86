"""`runbook playbooks lint|test|explain|schema|docs`, through the real CLI (typer's CliRunner, in process)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from engine.language.actions import REGISTRY
from engine.language.clauses import CLAUSE_TYPES
from engine.language.loader import load_playbook_file, load_playbooks
from runbook.cli import app
from runbook.docs_gen import CLAUSES, DOC_PATH, render_playbook_reference
from runbook.exit_codes import ExitCode
from runbook.playbook_schema import duration_fields, playbook_schema

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "playbooks"
SHIPPED_FILES = sorted(p for p in SHIPPED.iterdir() if p.suffix in (".yaml", ".yml"))
HEAD = "description: x\nmatch:\n  stalled: {}\nactions:\n  - stop: {}\n"


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


# Each broken file, the line lint must name, and a piece of the reason.
BROKEN = {
    "broken_yaml.yaml": ("name: broken\ndescription: x\nmatch:\n  log: {pattern: 'a'\nactions:\n  - stop: {}\n", 5, "invalid YAML"),
    "unknown_key.yaml": ("name: unknown-key\n" + HEAD + "colour: red\n", 7, "colour: unknown key"),
    "duplicate_b.yaml": ("name: dup\n" + HEAD, 1, "duplicate playbook name 'dup'"),
    "unknown_action.yaml": ("name: unknown-action\n" + HEAD + "  - reboot_cluster: {}\n", 7, "unknown action 'reboot_cluster'"),
    "bad_regex.yaml": ("name: bad-regex\ndescription: x\nmatch:\n  any:\n    - stalled: {}\n    - log:\n"
                       "        pattern: 'CUDA (out of memory'\nactions:\n  - stop: {}\n", 7, "bad regular expression"),
    "bad_expression.yaml": ("name: bad-expression\ndescription: x\nmatch:\n  expr: 'state.metrics.loss >'\n"
                            "actions:\n  - stop: {}\n", 4, "state.metrics.loss >"),
    "sandbox_escape.yaml": ("name: sandbox-escape\ndescription: x\nmatch:\n  all:\n    - stalled: {}\n"
                            "    - expr: '().__class__.__base__'\nactions:\n  - stop: {}\n", 6, "not allowed in the sandbox"),
    "wrong_param_type.yaml": ("name: wrong-param-type\n" + HEAD + "  - set_hyperparameters:\n      micro_batch_size: two\n",
                              7, "valid integer"),
    "unknown_inhibit.yaml": ("name: unknown-inhibit\ninhibits: [nothing-like-this]\n" + HEAD, 2, "unknown playbook 'nothing-like-this'"),
}


@pytest.fixture
def broken_folder(tmp_path: Path) -> Path:
    for name, (text, _, _) in BROKEN.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "duplicate_a.yaml").write_text("name: dup\n" + HEAD)
    return tmp_path


def test_lint_names_file_and_line_of_every_problem(broken_folder: Path):
    result = cli("playbooks", "lint", str(broken_folder))
    assert result.exit_code == ExitCode.INVALID
    lines = result.stdout.splitlines()
    for name, (_, line, reason) in BROKEN.items():
        found = [entry for entry in lines if entry.startswith(f"{broken_folder / name}:{line}:")]
        assert found and reason in found[0], f"{name}: expected line {line} with {reason!r} in:\n{result.stdout}"
    assert "1 playbook(s) valid, 9 invalid" in result.stdout  # duplicate_a is the valid one


def test_lint_warns_about_expressions_that_fail_at_runtime_but_passes(tmp_path: Path):
    (tmp_path / "typo.yaml").write_text(
        "name: typo\ndescription: x\nmatch:\n  any:\n    - stalled: {}\n    - expr: 'state.metrics.loss > \"3\"'\n"
        "actions:\n  - set_hyperparameters:\n      lr: '{{ config.lr * (state.trainer.exit_code or 0) }}'\n")
    result = cli("playbooks", "lint", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert f"{tmp_path / 'typo.yaml'}:6:7: match.any.1.expr: warning:" in result.stdout
    assert "'>' not supported" in result.stdout   # a typo of a field name is an error now (tests/unit/test_lint_typed.py)
    assert f"{tmp_path / 'typo.yaml'}:9:7: actions.0.set_hyperparameters.lr: warning:" in result.stdout
    assert "1 playbook(s) valid, 2 warning(s)" in result.stdout


def test_lint_of_the_shipped_playbooks_passes(monkeypatch):
    monkeypatch.chdir(REPO)  # the default is ./playbooks
    result = cli("playbooks", "lint")
    assert result.exit_code == 0, result.output
    assert f"{len(SHIPPED_FILES)} playbook(s) valid" in result.stdout


def test_a_file_named_alone_is_linted_among_the_shipped_playbooks_it_may_inhibit(tmp_path: Path):
    """QA: a draft (it inhibits unknown-crash) failed `playbooks lint FILE`: "inhibits: unknown playbook 'unknown-crash'"."""
    path = tmp_path / "my_crash.yaml"
    path.write_text("name: my-crash\ninhibits: [unknown-crash]\n" + HEAD)
    result = cli("playbooks", "lint", str(path))
    assert result.exit_code == 0 and "1 playbook(s) valid" in result.stdout, result.output
    path.write_text("name: my-crash\ninhibits: [unknown-crashes]\n" + HEAD)   # a typo is still one
    result = cli("playbooks", "lint", str(path))
    assert result.exit_code == ExitCode.INVALID and f"{path}:2:12: inhibits.0: unknown playbook 'unknown-crashes'" in result.stdout
    one_shipped = cli("playbooks", "lint", str(SHIPPED / "nan.yaml"))
    assert one_shipped.exit_code == 0 and "1 playbook(s) valid" in one_shipped.stdout and "replaces" not in one_shipped.stdout


def test_lint_of_an_empty_folder_fails(tmp_path: Path):
    assert cli("playbooks", "lint", str(tmp_path)).exit_code == ExitCode.INVALID


@pytest.mark.parametrize("path", SHIPPED_FILES, ids=[p.name for p in SHIPPED_FILES])
def test_every_shipped_playbook_loads(path: Path):
    playbook = load_playbook_file(path)
    assert playbook.description and playbook.actions
    assert path.stem.replace("_", "-") == playbook.name  # one playbook per file, named after it


def test_a_playbook_source_names_the_line_its_mapping_starts_on(tmp_path: Path):
    path = tmp_path / "commented.yaml"
    path.write_text("# Why this playbook exists:\n# two lines of header.\n\nname: commented\ndescription: x\n"
                    "match: {exit: {nonzero: true}}\nactions: [{escalate: {reason: r}}]\n")
    assert load_playbook_file(path).source == f"{path}:4"
    path.write_text("{name: flow, description: x, match: {exit: {nonzero: true}}, actions: [{stop: {}}]}\n")
    assert load_playbook_file(path).source == f"{path}:1"


def test_shipped_playbook_names_and_inhibitions_are_consistent():
    assert len(load_playbooks([SHIPPED])) == len(SHIPPED_FILES)


# --- playbooks test -------------------------------------------------------------------------------
def test_the_shipped_playbook_tests_pass():
    result = cli("playbooks", "test", str(SHIPPED))
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.stdout and re.search(r"[1-9]\d* passed, 0 failed", result.stdout)


def test_a_wrong_expectation_fails_the_run(tmp_path: Path):
    (tmp_path / "slow.yaml").write_text(
        "name: slow\ndescription: x\nmatch:\n  exit: {nonzero: true}\nfor: {observations: 2}\nactions:\n  - stop: {}\n"
        "tests:\n  - name: fires at once\n    observations:\n      - {trainer: {exit_code: 1}}\n"
        "      - {trainer: {exit_code: 1}}\n    expect_fires_at: 1\n")
    result = cli("playbooks", "test", str(tmp_path))
    assert result.exit_code == ExitCode.INVALID
    assert "FAIL slow: fires at once" in result.stdout
    assert "expected to fire at observation 1, fired at observation 2" in result.stdout


# --- explain --------------------------------------------------------------------------------------
SIGTERM = {"observation": 7, "time": 100.0, "trainer": {"alive": False, "exit_code": -15, "signal": "SIGTERM"},
           "metrics": {"step": 31}}


def explain(tmp_path: Path, name: str, data: dict):
    state = tmp_path / "state.json"
    state.write_text(json.dumps(data))
    return cli("playbooks", "explain", name, "--state", str(state), "--playbooks", str(SHIPPED))


def test_explain_a_match(tmp_path: Path):
    result = explain(tmp_path, "preemption", SIGTERM)
    assert result.exit_code == 0, result.output
    assert "[match]    exit: expected trainer exited with code in [143, 75] or signal in ['SIGTERM']; actual (-15, 'SIGTERM')" in result.stdout
    assert "result: MATCH" in result.stdout and "persistence:" in result.stdout and "limits:" in result.stdout
    assert "plan:" in result.stdout


def test_explain_no_match_clause_by_clause(tmp_path: Path):
    result = explain(tmp_path, "unknown-crash", SIGTERM)
    assert result.exit_code == ExitCode.NO_MATCH
    assert "[no match] all: expected every clause" in result.stdout
    assert "    [no match] not: expected the clause below does not match" in result.stdout
    assert "inhibited by: preemption" in result.stdout


def test_explain_reads_an_incident_record(tmp_path: Path):
    record = {"id": "incident-1", "snapshot": {**SIGTERM, "trainer": {"alive": False, "exit_code": 1}},
              "config_before": {"micro_batch_size": 2, "batch_size": 8}}
    result = explain(tmp_path, "unknown-crash", record)
    assert result.exit_code == 0, result.output
    assert "actual (1, None)" in result.stdout


def test_explain_an_unknown_playbook(tmp_path: Path):
    result = explain(tmp_path, "no-such-playbook", SIGTERM)
    assert result.exit_code == ExitCode.NOT_FOUND and "known:" in result.output


# --- schema ---------------------------------------------------------------------------------------
def _errors(instance, schema: dict, root: dict) -> list[str]:
    """A small JSON Schema check (the keywords our schema uses), enough to prove editors would accept it."""
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    for key, needed in (("anyOf", lambda n: n >= 1), ("oneOf", lambda n: n == 1)):
        if key in schema and not needed(sum(not _errors(instance, s, root) for s in schema[key])):
            return [f"{key}: {instance!r}"]
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    kind = schema.get("type")
    if kind in ("integer", "number"):
        allowed = int if kind == "integer" else (int, float)
        if isinstance(instance, bool) or not isinstance(instance, allowed):
            return [f"not {kind}: {instance!r}"]
    elif kind and not isinstance(instance, kinds[kind]):
        return [f"not {kind}: {instance!r}"]
    if "enum" in schema and instance not in schema["enum"]:
        return [f"not in {schema['enum']}: {instance!r}"]
    if "pattern" in schema and isinstance(instance, str) and not re.search(schema["pattern"], instance):
        return [f"does not match {schema['pattern']}: {instance!r}"]
    errors = []
    if isinstance(instance, dict):
        properties = schema.get("properties", {})
        errors += [f"missing {k}" for k in schema.get("required", []) if k not in instance]
        for key, value in instance.items():
            if key in properties:
                errors += _errors(value, properties[key], root)
            elif schema.get("additionalProperties") is False:
                errors.append(f"unknown key {key}")
    if isinstance(instance, list) and "items" in schema:
        errors += [e for item in instance for e in _errors(item, schema["items"], root)]
    return errors


def test_schema_is_json_with_every_verb(tmp_path: Path):
    out = tmp_path / "playbook.schema.json"
    assert cli("playbooks", "schema", "--output", str(out)).exit_code == 0
    schema = json.loads(out.read_text())
    assert json.loads(cli("playbooks", "schema").stdout) == schema
    for verb, definition in REGISTRY.items():
        params = schema["$defs"][f"action_{verb}"]["properties"][verb]
        params = params["anyOf"][0] if "anyOf" in params else params
        fields = {f.alias or name for name, f in definition.params.model_fields.items()}
        assert set(params.get("properties", {})) == fields, verb
    assert {r["$ref"].rsplit("_", 1)[-1] for r in schema["$defs"]["ActionStep"]["oneOf"]} >= {"run", "wait"}


@pytest.mark.parametrize("path", SHIPPED_FILES, ids=[p.name for p in SHIPPED_FILES])
def test_schema_accepts_every_shipped_playbook(path: Path):
    schema = playbook_schema()
    assert _errors(YAML(typ="safe", pure=True).load(path.read_text()), schema, schema) == []


@pytest.mark.parametrize("change", [
    {"actions": [{"reboot_cluster": {}}]}, {"colour": "red"}, {"priority": "high"},
    {"match": {"log": {"pattern": "x"}, "exit": {}}}, {"limits": {"window": "soon"}},
    {"actions": [{"wait": {"seconds": "5s"}, "on_failure": "retry"}]},
])
def test_schema_rejects_what_the_loader_rejects(change: dict):
    schema = playbook_schema()
    valid = {"name": "x", "description": "x", "match": {"stalled": {}}, "actions": [{"wait": {"seconds": "5s"}}],
             "limits": {"window": "1h", "cooldown": 30}}
    assert _errors(valid, schema, schema) == []
    assert _errors({**valid, **change}, schema, schema) != []


def test_durations_are_found_in_the_models():
    from engine.language.playbook import Limits, Persistence

    assert duration_fields(Persistence) == {"seconds"}
    assert duration_fields(Limits) == {"window", "cooldown"}  # not max_attempts, not backoff
    assert duration_fields(REGISTRY["wait"].params) == {"seconds"}
    assert duration_fields(REGISTRY["run"].params) == set()  # a plain number of seconds
    schema = playbook_schema()
    window = schema["$defs"]["Limits"]["properties"]["window"]
    assert _errors("5m", window, schema) == [] and _errors("soon", window, schema) != []


# --- docs -----------------------------------------------------------------------------------------
def test_committed_reference_is_the_generated_one():
    assert (REPO / DOC_PATH).read_text(encoding="utf-8") == render_playbook_reference(), \
        "docs/playbooks.md is out of date: run `runbook playbooks docs`"


def test_reference_has_an_example_of_every_clause_and_action():
    assert set(CLAUSES) == set(CLAUSE_TYPES)
    text = render_playbook_reference()
    for name in [*CLAUSE_TYPES, *REGISTRY]:
        assert f"### `{name}`" in text


def test_docs_check_fails_on_a_stale_file(tmp_path: Path):
    stale = tmp_path / "playbooks.md"
    stale.write_text("# old\n")
    assert cli("playbooks", "docs", "--check", "--output", str(stale)).exit_code == ExitCode.INVALID
    assert cli("playbooks", "docs", "--output", str(stale)).exit_code == 0
    assert cli("playbooks", "docs", "--check", "--output", str(stale)).exit_code == 0
