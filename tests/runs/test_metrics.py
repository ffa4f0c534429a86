"""The Prometheus endpoint (`watch.metrics`, engine/watch/metrics.py): a real `runbook watch` of the toy
trainer, SIGKILLed mid-run, scraped over HTTP all along; a second watcher whose port is taken still
supervises its run, without an endpoint; and the pure state -> metrics function on its own.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.trainers.run_config import load_config
from engine.watch.metrics import ADDRESS_FILE, IncidentFigures, WatcherView, goodput, metric_families
from engine.core.state import CheckpointStatus, Metrics, RankStatus, RanksStatus, RunPhase, StateSnapshot, TrainerStatus
from engine.core.yaml_source import SourceError
from runbook.report import read_history
from tests.conftest import REPO, stop_process, wait_for
from tests.runs.test_toy_trainer import make_toy_project

def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


class Scraper(threading.Thread):
    """Scrapes every 50 ms for as long as the endpoint answers, keeping every answer."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.scrapes, self.done = url, [], threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.scrapes.append(scrape(self.url))
            except OSError:   # the watcher ended (the endpoint with it), or a scrape timed out under load
                return
            time.sleep(0.05)


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory) -> dict:
    """One toy run (40 steps of 0.15 s, a checkpoint every 5) with the endpoint on a free port, SIGKILLed
    after step 12; beside it, a second toy run told to use the same port."""
    project = make_toy_project(tmp_path_factory.mktemp("metrics") / "project", step_seconds=0.15)
    # The shipped `killed` recovery takes ~0.07 s on a quiet machine, less than a scrape interval: this copy
    # waits 1 s first, so that scrapes taken during the recovery can be asserted on any machine.
    playbooks = project.root / "playbooks"
    playbooks.mkdir()
    killed = (REPO / "playbooks" / "killed.yaml").read_text().split("tests:")[0]
    killed = killed.replace("inhibits: [unknown-crash]\n", "").replace("actions:\n", "actions:\n  - wait: {seconds: 1}\n", 1)
    (playbooks / "killed.yaml").write_text(killed)
    project.set(watch={"metrics": {"port": 0}}, playbooks={"paths": [str(playbooks)], "shipped": False})
    env = {"PYTHONPATH": str(REPO)}
    watcher = project.watch(env=env)
    address = project.run_dir / ADDRESS_FILE
    busy = make_toy_project(tmp_path_factory.mktemp("metrics-busy") / "project", step_seconds=0.0)
    found = {"project": project, "busy": busy}
    try:
        wait_for(address.exists, 60, what=f"{address} (the endpoint's URL)\n{project.watch_output()}")
        url = found["url"] = address.read_text().strip()
        busy.set(watch={"metrics": {"port": int(url.rsplit(":", 1)[1].split("/")[0])}})
        other = busy.watch(env=env)
        scraper = Scraper(url)
        scraper.start()
        wait_for(lambda: (value(scrape(url), "runbook_optimizer_step") or 0) >= 12, 60, what="step 12 in a scrape")
        found["before"] = scrape(url)
        os.kill(project.trainer_pid(), signal.SIGKILL)
        wait_for(lambda: [i for i in project.incidents() if i["outcome"] != "open"], 60, what="the incident to close")
        [found["incident"]] = project.incidents()
        def relaunched_and_progressing() -> bool:   # the relaunch's own progress, not the last snapshot before it
            found["after"] = now = scrape(url)
            return value(now, "runbook_trainer_launches") == 2 and \
                (value(now, "runbook_optimizer_step") or 0) > found["incident"]["resumed_step"] + 2

        wait_for(relaunched_and_progressing, 60, what="progress after the relaunch")
        assert watcher.wait(timeout=120) == 0, project.watch_output()
        assert other.wait(timeout=120) == 0, busy.watch_output()
        scraper.join(timeout=15)
        found["scrapes"] = scraper.scrapes
    finally:
        stop_process(watcher)
    return found


def test_a_scrape_reports_the_runs_progress_and_its_incident(watched_run):
    before, after, incident = watched_run["before"], watched_run["after"], watched_run["incident"]
    assert value(before, "runbook_run_state", state="running") == 1.0
    assert value(before, "runbook_incidents_total", outcome="recovered", playbook="killed") is None
    assert value(before, "runbook_steps_lost_total") == 0.0 and value(before, "runbook_goodput_ratio") == 1.0
    step = value(before, "runbook_optimizer_step")
    assert step >= 12 and value(before, "runbook_tokens") > 0
    assert value(before, "runbook_tokens_per_second") > 0
    assert value(before, "runbook_trainer_ranks_alive") == 1.0 and value(before, "runbook_trainer_world_size") == 1.0

    assert incident["playbook"] == "killed" and incident["outcome"] == "recovered", incident
    assert incident["steps_lost"] >= 1, incident   # killed after step 12, resumed from a checkpoint at most 12
    assert value(after, "runbook_incidents_total", outcome="recovered", playbook="killed") == 1.0
    assert value(after, "runbook_steps_lost_total") == float(incident["steps_lost"])
    now = value(after, "runbook_optimizer_step")
    assert now > incident["resumed_step"] + 2 and value(after, "runbook_tokens") > 0
    assert value(after, "runbook_goodput_ratio") == pytest.approx(now / (now + incident["steps_lost"]))
    checkpoint = value(after, "runbook_last_verified_checkpoint_step")
    assert checkpoint >= incident["resumed_step"] and checkpoint % 5 == 0
    assert 0 <= value(after, "runbook_last_verified_checkpoint_age_seconds") < 120


def test_scrapes_all_along_the_run_see_steps_grow_and_counters_never_fall(watched_run):
    scrapes = watched_run["scrapes"]
    assert len(scrapes) >= 10, len(scrapes)
    steps = [value(s, "runbook_optimizer_step") for s in scrapes if value(s, "runbook_optimizer_step") is not None]
    assert steps[-1] > steps[0], steps
    for name in ("runbook_steps_lost_total", "runbook_incidents_total"):
        series = [sum(v for (n, _), v in s.items() if n == name) for s in scrapes]
        assert series == sorted(series), (name, series)
    for s in scrapes:   # exactly one state at a time
        assert sorted(v for (n, _), v in s.items() if n == "runbook_run_state") == [0.0] * 6 + [1.0], s
    states = [next(labels[0][1] for (n, labels), v in s.items() if n == "runbook_run_state" and v == 1.0) for s in scrapes]
    changes = [state for i, state in enumerate(states) if i == 0 or state != states[i - 1]]
    # The recovery (its playbook waits 1 s, see watched_run) spans several 50 ms scrapes.
    assert "running" in changes and {"incident", "recovering"} & set(changes[changes.index("running"):]) and \
        changes.count("running") >= 2, f"no scrape during the incident: {changes}"


def test_the_endpoint_ends_with_the_watcher(watched_run):
    project = watched_run["project"]
    assert not (project.run_dir / ADDRESS_FILE).exists()
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        scrape(watched_run["url"])
    journal = (project.run_dir / "journal.jsonl").read_text()
    assert f'"url": "{watched_run["url"]}"' in journal


def test_a_taken_port_is_a_warning_and_the_run_is_still_supervised(watched_run):
    busy = watched_run["busy"]
    output = busy.watch_output()
    assert "warning: no metrics endpoint: cannot listen on 127.0.0.1:" in output and "watching without it" in output, output
    assert (busy.out_dir / "final" / "state.json").is_file()
    assert not (busy.run_dir / ADDRESS_FILE).exists()


def test_the_live_goodput_is_the_reports_once_the_run_is_over(watched_run):
    project, incident = watched_run["project"], watched_run["incident"]
    history = read_history(load_config(project.config))
    assert history.goodput == pytest.approx(goodput(history.useful_steps, incident["steps_lost"]))


# --- the pure function ---------------------------------------------------------------------------

def snapshot(**metrics) -> StateSnapshot:
    ranks = RanksStatus(world_size=2, ranks=[RankStatus(rank=0, alive=True), RankStatus(rank=1, alive=False)])
    return StateSnapshot(time=1000.0, metrics=Metrics(**metrics), seconds_since_progress=2.5,
                         trainer=TrainerStatus(pid=42, alive=True, launches=3, ranks=ranks),
                         checkpoints=CheckpointStatus(count=2, newest_step=30, newest_verified_step=20))


def as_dict(families) -> dict:
    return {(f.name, labels): v for f in families for labels, v in f.samples}


def test_metric_values_are_a_pure_function_of_what_the_watcher_knows():
    incidents = (IncidentFigures("killed", "recovered", 4), IncidentFigures("killed", "recovered", 6),
                 IncidentFigures("oom", "escalated", None), IncidentFigures("hang", "open", None))
    view = WatcherView(RunPhase.RECOVERING, snapshot(step=90, tokens=90 * 1024, tokens_per_sec=512.5),
                       incidents, checkpoint_saved_at=940.0, now=1000.0)
    values = as_dict(metric_families(view))
    assert values[("runbook_run_state", ("recovering",))] == 1.0
    assert sum(v for (n, _), v in values.items() if n == "runbook_run_state") == 1.0
    assert values[("runbook_incidents_total", ("killed", "recovered"))] == 2.0
    assert values[("runbook_incidents_total", ("oom", "escalated"))] == 1.0
    assert ("runbook_incidents_total", ("hang", "open")) not in values   # an open one is not counted yet
    assert values[("runbook_incidents_open", ())] == 1.0
    assert values[("runbook_steps_lost_total", ())] == 10.0
    assert values[("runbook_goodput_ratio", ())] == pytest.approx(90 / 100)
    assert values[("runbook_optimizer_step", ())] == 90.0 and values[("runbook_tokens", ())] == 90 * 1024
    assert values[("runbook_tokens_per_second", ())] == 512.5
    assert values[("runbook_last_verified_checkpoint_step", ())] == 20.0
    assert values[("runbook_last_verified_checkpoint_age_seconds", ())] == 60.0
    assert values[("runbook_trainer_ranks_alive", ())] == 1.0 and values[("runbook_trainer_world_size", ())] == 2.0
    assert values[("runbook_seconds_since_progress", ())] == 2.5 and values[("runbook_trainer_launches", ())] == 3.0
    assert metric_families(view) == metric_families(view)
    kinds = {f.name: f.kind for f in metric_families(view)}
    assert {n for n, k in kinds.items() if k == "counter"} == {"runbook_incidents_total", "runbook_steps_lost_total"}


def test_the_endpoint_serves_what_the_bus_said_and_lingers_only_after_an_escalation_it_heard(tmp_path):
    """The endpoint is one more subscriber of the loop's bus (issue 46): its phase and snapshot are the
    newest Transition and Observed it heard, other events leave them alone, and a scrape reads them."""
    from engine.core.events import EventBus, Observed, Transition, WatchWarning
    from engine.watch.metrics import MetricsEndpoint, MetricsSettings, RunView

    bus, run = EventBus(), RunView()
    bus.subscribe(run)
    endpoint = MetricsEndpoint(MetricsSettings(port=0, linger_s=30.0), tmp_path, run, lambda step: tmp_path / "none")
    url = endpoint.start()

    def scraped() -> dict[str, float]:
        with urllib.request.urlopen(url, timeout=10) as answer:
            families = text_string_to_metric_families(answer.read().decode())
            return {(s.name + "".join(f"|{v}" for v in s.labels.values())): s.value for f in families for s in f.samples}

    try:
        assert scraped()["runbook_run_state|starting"] == 1.0 and "runbook_optimizer_step" not in scraped()
        bus.publish(Transition(RunPhase.STARTING, RunPhase.RUNNING, "launched"))
        bus.publish(Observed(StateSnapshot(metrics=Metrics(step=7, tokens=700))))
        bus.publish(WatchWarning("not a phase, not a snapshot"))
        now = scraped()
        assert (now["runbook_run_state|running"], now["runbook_run_state|starting"], now["runbook_optimizer_step"],
                now["runbook_tokens"]) == (1.0, 0.0, 7.0, 700.0), now
        started = time.monotonic()
        endpoint.linger(lambda: False)   # running: no linger
        assert time.monotonic() - started < 5
        bus.publish(Transition(RunPhase.RUNNING, RunPhase.ESCALATED, "oom escalated"))
        assert scraped()["runbook_run_state|escalated"] == 1.0 and scraped()["runbook_optimizer_step"] == 7.0
        calls = []
        endpoint.linger(lambda: calls.append(1) is None and len(calls) > 2)   # escalated: waits until interrupted
        assert len(calls) == 3
    finally:
        endpoint.shutdown()


def test_what_nobody_knows_yet_is_left_out_not_reported_as_zero():
    starting = as_dict(metric_families(WatcherView(RunPhase.STARTING, None, (), None, 0.0)))
    assert starting[("runbook_run_state", ("starting",))] == 1.0
    assert not [k for k in starting if k[0] in ("runbook_optimizer_step", "runbook_goodput_ratio")]
    no_progress = as_dict(metric_families(WatcherView(RunPhase.RUNNING, snapshot(), (), None, 0.0)))
    for name in ("runbook_optimizer_step", "runbook_tokens", "runbook_tokens_per_second", "runbook_goodput_ratio",
                 "runbook_last_verified_checkpoint_age_seconds"):
        assert (name, ()) not in no_progress, name
    assert goodput(0, 0) is None


@pytest.mark.parametrize("bad, message", [
    ({"port": True}, "watch.metrics.port"), ({"port": "9100"}, "watch.metrics.port"),
    ({"port": 70000}, "less than or equal to 65535"), ({"prot": 9100}, "watch.metrics.prot"),
    ({"host": ""}, "watch.metrics.host"),
])
def test_a_bad_metrics_setting_is_a_config_error_with_its_line(tmp_path, bad, message):
    project = make_toy_project(tmp_path / "project")
    project.set(watch={"metrics": bad})
    with pytest.raises(SourceError) as refused:
        load_config(project.config)
    text = "\n".join(refused.value.messages)
    assert message in text and f"{project.config}:" in text, text


def test_a_port_in_use_refuses_to_start_the_endpoint_itself(tmp_path):
    from engine.watch.metrics import MetricsEndpoint, MetricsSettings, RunView

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        endpoint = MetricsEndpoint(MetricsSettings(port=taken.getsockname()[1]), tmp_path,
                                   RunView(RunPhase.RUNNING), lambda step: tmp_path / "none")
        with pytest.raises(OSError):
            endpoint.start()
    assert not (tmp_path / ADDRESS_FILE).exists()
    endpoint.shutdown()   # nothing started: nothing to do



def escalating_run(root, linger_s: float):
    """A toy run that runs out of memory at micro-batch 1: the oom playbook escalates at its first firing."""
    project = make_toy_project(root)
    project.set(micro_batch_size=1, watch={"metrics": {"port": 0, "linger_s": linger_s}},
                trainer={"extra": {"oom_above_micro_batch": 0}})
    return project


def wait_for_escalated_scrape(project):
    """The endpoint's address file, once a scrape of it says the run escalated."""
    address = project.run_dir / ADDRESS_FILE
    wait_for(address.exists, 60, what=f"the endpoint's URL\n{project.watch_output()}")
    url = address.read_text().strip()
    wait_for(lambda: value(scrape(url), "runbook_run_state", state="escalated") == 1.0, 60, what="an escalated scrape")
    return address


def test_an_escalation_stays_served_for_linger_s_then_the_watcher_exits(tmp_path):
    """Prometheus scrapes every 15-60 s; a watcher that exits at its escalation would rarely be seen in
    that state (ops/prometheus's RunbookEscalated): it serves the escalated state for linger_s first."""
    project = escalating_run(tmp_path / "project", linger_s=4.0)
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        address = wait_for_escalated_scrape(project)
        seen = time.monotonic()
        assert watcher.poll() is None                          # still serving after the escalation
        code = watcher.wait(timeout=60)
        waited = time.monotonic() - seen
    finally:
        stop_process(watcher)
    assert code != 0, project.watch_output()                   # an escalated watch is not a success
    assert 1.0 < waited < 30, waited                           # about linger_s after the escalation was served
    assert not address.exists()                                # and no stale address once nobody answers
    [incident] = project.incidents()
    assert (incident["playbook"], incident["outcome"]) == ("oom", "escalated"), incident


def test_a_signal_during_the_linger_ends_the_watcher_at_once(tmp_path):
    project = escalating_run(tmp_path / "project", linger_s=600.0)
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        wait_for_escalated_scrape(project)
        watcher.send_signal(signal.SIGTERM)
        started = time.monotonic()
        watcher.wait(timeout=60)
        assert time.monotonic() - started < 15                  # not the 600 s linger
    finally:
        stop_process(watcher)
