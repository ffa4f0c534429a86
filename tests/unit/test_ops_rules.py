"""The ops files shipped in ops/: Prometheus alert rules (ops/prometheus/runbook-alerts.yaml), their
unit tests for `promtool test rules` (runbook-alerts.test.yaml), and the Grafana dashboard
(ops/grafana/runbook-dashboard.json).

promtool is Debian's (the `prometheus` package). When it is not on PATH it is taken out of that package
without installing it: `apt-get download prometheus` and `dpkg-deb` extract the one binary into a cache
folder (~3 s, 19 MB), so no Prometheus server gets installed, enabled or started, and none of the
package's eleven web-asset dependencies. As root (CI) a promtool that cannot be had is a failure; as
another user the promtool tests are skipped, saying why.

Every metric name a rule or a panel queries is checked against the names a real endpoint serves
(MetricsEndpoint on 127.0.0.1, scraped over HTTP), so a renamed metric breaks this test, not a dashboard.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from engine.core.state import CheckpointStatus, Metrics, RankStatus, RanksStatus, RunPhase, StateSnapshot, TrainerStatus
from engine.records.incident import Incident
from engine.records.incident_store import IncidentStore
from engine.core.events import EventBus, Observed, Transition
from engine.watch.metrics import MetricsEndpoint, MetricsSettings, RunView
from tests.conftest import REPO

RULES = REPO / "ops" / "prometheus" / "runbook-alerts.yaml"
RULE_TESTS = REPO / "ops" / "prometheus" / "runbook-alerts.test.yaml"
DASHBOARD = REPO / "ops" / "grafana" / "runbook-dashboard.json"
ALERTS = {"RunbookEscalated", "RunbookWatcherDown", "RunbookNoTrainingProgress", "RunbookIncidentRateHigh",
          "RunbookCheckpointStale"}
PROMETHEUS_OWN = {"up"}   # series Prometheus writes itself for every scrape target
PROMTOOL_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "runbook-tests" / "promtool"


# --- promtool --------------------------------------------------------------------------------------

def _extract_promtool(into: Path) -> str:
    """promtool out of Debian's prometheus package, not installed: '' when done, else why not."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with tempfile.TemporaryDirectory() as scratch:
        def download() -> subprocess.CompletedProcess:
            return subprocess.run(["apt-get", "download", "-qq", "prometheus"], cwd=scratch, env=env,
                                  capture_output=True, text=True, timeout=600)
        got = download()
        if got.returncode != 0 and os.geteuid() == 0:   # package lists missing or stale
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
            got = download()
        debs = sorted(Path(scratch).glob("prometheus_*.deb"))
        if got.returncode != 0 or not debs:
            return f"`apt-get download prometheus` failed (exit {got.returncode}): {got.stderr.strip()[-500:]}"
        staging = Path(tempfile.mkdtemp(dir=into.parent, prefix=".promtool-"))
        unpack = subprocess.run(["bash", "-o", "pipefail", "-c",
                                 'dpkg-deb --fsys-tarfile "$1" | tar -x -C "$2" ./usr/bin/promtool', "-", debs[-1], staging],
                                capture_output=True, text=True, timeout=300)
        if unpack.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            return f"could not extract promtool from {debs[-1].name}: {unpack.stderr.strip()[-500:]}"
        (staging / "usr" / "bin" / "promtool").rename(into)   # whole or not at all, for a concurrent session
        shutil.rmtree(staging, ignore_errors=True)
    return ""


@pytest.fixture(scope="session")
def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    cached = PROMTOOL_CACHE / "promtool"
    if not cached.is_file():
        why = "this machine has no apt-get (promtool comes from Debian's prometheus package)"
        if shutil.which("apt-get") and shutil.which("dpkg-deb"):
            PROMTOOL_CACHE.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            why = _extract_promtool(cached)
            print(f"promtool from Debian's prometheus package in {time.monotonic() - started:.1f} s")
        if why:
            message = f"promtool is not on PATH and could not be had: {why}"
            if os.geteuid() == 0:   # CI runs as root with Debian's registry reachable: this must not pass unseen
                pytest.fail(message)
            pytest.skip(message)
    return str(cached)


def run_promtool(promtool: str, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


def output(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


# --- the files ---------------------------------------------------------------------------------------

def alert_rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def recorded_names() -> set[str]:
    return {r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "record" in r}


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every query of the dashboard: panel targets (rows' nested panels too), annotations."""
    board = json.loads(DASHBOARD.read_text())
    found = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                found.append((f"panel {panel['title']!r} target {target['refId']}", target["expr"]))
            walk(panel.get("panels", []))

    walk(board["panels"])
    found += [(f"annotation {a['name']!r}", a["expr"]) for a in board["annotations"]["list"] if "expr" in a]
    return found


def dashboard_variable_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(f"variable {v['name']!r}", v["query"]["query"]) for v in board["templating"]["list"] if v["type"] == "query"]


def as_plain_promql(expr: str) -> str:
    """A Grafana query as Prometheus evaluates it: its variables replaced by what Grafana sends."""
    for variable, value in {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "${instance}": ".*",
                            "$instance": ".*"}.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"a Grafana variable this test does not know: {expr}"
    return expr


# --- metric names in PromQL --------------------------------------------------------------------------

_KEYWORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring", "group_left", "group_right",
             "inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (a small lexer: enough for the queries shipped here,
    held to it by test_the_metric_name_reader_finds_names_and_only_names)."""
    label_values = re.fullmatch(r"\s*label_values\(\s*(?:(.+),)?\s*\w+\s*\)\s*", expr)
    if label_values:   # Grafana's variable query: an optional series selector, then a label name
        return metric_names(label_values.group(1)) if label_values.group(1) else set()
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)   # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)             # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)            # ranges, subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)   # label lists
    names = set()
    for word in re.finditer(r"(?<![\w:.])[A-Za-z_:][\w:]*", text):
        if word.group().lower() in _KEYWORDS or re.match(r"\s*\(", text[word.end():]):   # a keyword, a function
            continue
        names.add(word.group())
    return names


def test_the_metric_name_reader_finds_names_and_only_names():
    assert metric_names('runbook_x') == {"runbook_x"}
    assert metric_names('max_over_time(runbook_a{state="escalated"}[1h]) == 1 unless on(job, instance) '
                        'runbook_b{state="x"} == 0') == {"runbook_a", "runbook_b"}
    assert metric_names('sum by (job, instance) (runbook_a) + (sum by (instance)(runbook_b) or sum(runbook_a) * 0)') \
        == {"runbook_a", "runbook_b"}
    assert metric_names('max_over_time(level:runbook_c:count[1h:1m]) - min_over_time(level:runbook_c:count[1h]) > 3') \
        == {"level:runbook_c:count"}
    assert metric_names('up{job="runbook"} == 0 or absent(up{job="runbook"})') == {"up"}
    assert metric_names('clamp_min(runbook_a{x=~"by (a)"} - 1, 0) > bool 2e3 offset 5m') == {"runbook_a"}
    assert metric_names('sum(rate(runbook_a_total[5m])) without (playbook)') == {"runbook_a_total"}
    assert metric_names('label_values(runbook_run_state{job="runbook"}, instance)') == {"runbook_run_state"}
    assert metric_names('label_values(instance)') == set()


def runbook_words(expr: str) -> set[str]:
    """A second, dumber reader: every whole runbook_ word, wherever it stands."""
    return set(re.findall(r"(?<![\w:])runbook_\w+(?![\w:])", expr))


@pytest.fixture(scope="module")
def served_names(tmp_path_factory) -> set[str]:
    """The series names a real endpoint serves, every family with a value (a family that has no
    sample in a scrape would leave its name out): scraped over HTTP from MetricsEndpoint on 127.0.0.1."""
    run_dir = tmp_path_factory.mktemp("ops-metrics")
    store = IncidentStore(run_dir)
    store.write(Incident(id="incident-1", playbook="killed", outcome="recovered", steps_lost=3))
    store.write(Incident(id="incident-2", playbook="hang"))
    resume_file = run_dir / "lit_model.pth"
    resume_file.write_bytes(b"checkpoint")
    ranks = RanksStatus(world_size=2, ranks=[RankStatus(rank=0, alive=True), RankStatus(rank=1, alive=True)])
    snapshot = StateSnapshot(time=time.time(), metrics=Metrics(step=90, tokens=90 * 1024, tokens_per_sec=512.0),
                             seconds_since_progress=1.5, trainer=TrainerStatus(pid=42, alive=True, launches=2, ranks=ranks),
                             checkpoints=CheckpointStatus(count=2, newest_step=80, newest_verified_step=80))
    bus, run = EventBus(), RunView()
    bus.subscribe(run)   # as the supervisor subscribes it: what the endpoint serves is what the bus said
    bus.publish(Transition(RunPhase.STARTING, RunPhase.RUNNING, "launched"))
    bus.publish(Observed(snapshot))
    endpoint = MetricsEndpoint(MetricsSettings(port=0), run_dir, run, lambda step: resume_file)
    url = endpoint.start()
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
    finally:
        endpoint.shutdown()
    families = list(text_string_to_metric_families(text))
    assert [f.name for f in families if not f.samples] == [], text
    names = {s.name for f in families for s in f.samples}   # counters as served: runbook_incidents_total, ...
    assert {"runbook_run_state", "runbook_incidents_total", "runbook_optimizer_step",
            "runbook_last_verified_checkpoint_age_seconds"} <= names, names
    return names


def test_every_metric_the_alert_rules_query_is_one_the_endpoint_serves(served_names):
    known = served_names | PROMETHEUS_OWN | recorded_names()
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        used = metric_names(rule["expr"])
        assert used, rule
        assert used <= known, f"{rule.get('alert') or rule.get('record')}: {sorted(used - known)} not served " \
                              f"(served: {sorted(served_names)})"
        assert runbook_words(rule["expr"]) <= known, rule


def test_every_metric_the_dashboard_queries_is_one_the_endpoint_serves(served_names):
    known = served_names | PROMETHEUS_OWN
    queries = dashboard_queries() + dashboard_variable_queries()
    assert len(queries) >= 15, queries
    for where, expr in queries:
        used = metric_names(expr)
        assert used, f"{where}: no metric in {expr!r}"
        assert used <= known, f"{where}: {sorted(used - known)} not served (served: {sorted(served_names)})"
        assert runbook_words(expr) <= known, f"{where}: {sorted(runbook_words(expr) - known)}"
    # The dashboard shows every metric the endpoint serves.
    shown = set().union(*(metric_names(e) for _, e in queries))
    assert served_names - shown == set(), sorted(served_names - shown)


# --- the rules' and the dashboard's own checks -----------------------------------------------------

def test_each_alert_has_a_severity_a_summary_a_description_and_a_for():
    rules = alert_rules()
    assert {r["alert"] for r in rules} == ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule
        assert rule["annotations"]["summary"].strip() and len(rule["annotations"]["description"]) > 80, rule
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule
        assert "$labels.instance" in rule["annotations"]["summary"], rule


def test_every_alert_has_a_case_where_it_fires_and_one_where_it_must_not():
    cases = [c for t in yaml.safe_load(RULE_TESTS.read_text())["tests"] for c in t.get("alert_rule_test", [])]
    for alert in ALERTS:
        mine = [c for c in cases if c["alertname"] == alert]
        assert [c for c in mine if c["exp_alerts"]], f"{alert}: no case where it fires"
        assert [c for c in mine if not c["exp_alerts"]], f"{alert}: no case where it must not fire"


def test_promtool_accepts_the_rules(promtool):
    done = run_promtool(promtool, "check", "rules", RULES)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, output(done)


def test_the_rules_pass_their_promtool_unit_tests(promtool):
    done = run_promtool(promtool, "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, output(done)


@pytest.mark.parametrize("file, before, after, alert", [
    # a test that expects a label the alert does not carry
    (RULE_TESTS, 'exp_labels: {severity: warning, job: runbook, instance: "gpu1:9464"}',
     'exp_labels: {severity: critical, job: runbook, instance: "gpu1:9464"}', "RunbookNoTrainingProgress"),
    # a threshold moved: the alert no longer fires where its test says it must
    (RULES, "runbook_last_verified_checkpoint_age_seconds > 3600", "runbook_last_verified_checkpoint_age_seconds > 7200",
     "RunbookCheckpointStale"),
    # the incident count through increase(), which misses a new (playbook, outcome) series' first incident
    (RULES, "max_over_time(instance:runbook_incidents:count[1h]) - min_over_time(instance:runbook_incidents:count[1h]) > 3",
     "sum by (job, instance) (increase(runbook_incidents_total[1h])) > 3", "RunbookIncidentRateHigh"),
])
def test_promtool_fails_a_broken_copy(promtool, tmp_path, file, before, after, alert):
    for original in (RULES, RULE_TESTS):
        shutil.copy(original, tmp_path / original.name)
    broken = tmp_path / file.name
    assert before in broken.read_text()
    broken.write_text(broken.read_text().replace(before, after, 1))
    done = run_promtool(promtool, "test", "rules", RULE_TESTS.name, cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "FAILED" in said and f"alertname: {alert}," in said, output(done)


def check_as_rules(promtool: str, folder: Path, queries: list[tuple[str, str]]) -> subprocess.CompletedProcess:
    """promtool parses PromQL only in rule files: each query becomes a recording rule."""
    rules = [{"record": f"dashboard_query_{i}", "expr": as_plain_promql(expr)} for i, (_, expr) in enumerate(queries)]
    path = folder / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    return run_promtool(promtool, "check", "rules", path)


def test_every_dashboard_query_is_promql_that_promtool_parses(promtool, tmp_path):
    queries = dashboard_queries()
    done = check_as_rules(promtool, tmp_path, queries)
    assert done.returncode == 0 and f"SUCCESS: {len(queries)} rules found" in done.stdout, output(done)
    broken = check_as_rules(promtool, tmp_path, [*queries, ("a typo", 'sum by (instance) (runbook_tokens{job="runbook"}')])
    assert broken.returncode != 0, output(broken)


def test_the_dashboard_is_one_grafana_can_import():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"] and isinstance(board["schemaVersion"], int)
    panels = [p for p in board["panels"]] + [q for p in board["panels"] for q in p.get("panels", [])]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), ids
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all('job="runbook"' in t["expr"] and 'instance=~"$instance"' in t["expr"] for t in panel["targets"]), \
            panel["title"]
