"""engine.watch.upkeep: jobs called directly on real folders, triggers checked at a fixed time, and the
scheduler started and stopped for real. The only stand-in is the Slack boundary (a recording
notifier), plus one test through the real SlackNotifier against the fake Slack HTTP server."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import threading
import time
from pathlib import Path

import pydantic
import pytest

from engine.core.events import WatchWarning
from engine.checkpoints.manifest import seal_checkpoint
from engine.checkpoints.store import list_checkpoints
from engine.checkpoints.catalog import CheckpointCatalog
from engine.core.run_folder import RunFolder
from engine.trainers import adapter_for
from engine.watch.upkeep import HEARTBEAT_NAME, Upkeep, UpkeepSettings, digest_message
from runbook.slack import NullNotifier, SlackNotifier, SlackSettings
from tests.fake_slack import FakeSlack
from tests.unit.test_checkpoints import announce, make_ckpt

UTC = dt.timezone.utc
FIXED_NOW = dt.datetime(2027, 1, 15, 8, 0, 0, tzinfo=UTC)


class RecordingNotifier(NullNotifier):
    def __init__(self):
        self.digests: list[tuple[str, str, dict]] = []

    def digest(self, title, text, fields):
        self.digests.append((title, text, fields))


class Watcher:
    """A minimal UpkeepPorts over real folders (the supervisor implements the same members)."""

    def __init__(self, root: Path, keep_last_k: int = 2):
        self.run_dir = root / "runs" / "pretrain"
        self.out_dir = root / "checkpoints" / "pretrain"
        self.run_dir.mkdir(parents=True)
        self.out_dir.mkdir(parents=True)
        self.keep_last_k = keep_last_k
        self.notifier = RecordingNotifier()
        self.catalog = CheckpointCatalog(self.out_dir, RunFolder(self.run_dir), self.run_dir / "quarantine",
                                       adapter_for("litgpt"))
        self.best: int | None = None
        self.alive = False
        self.log: Path | None = None

    @property
    def verified(self) -> set[int]:
        return self.catalog.verified

    def best_step(self) -> int | None:
        return self.best

    def trainer_alive(self) -> bool:
        return self.alive

    def current_log(self) -> Path | None:
        return self.log

    def status(self) -> dict:
        return {"step": 31, "tokens": 31744, "tokens_per_sec": 9123.4, "run_state": "running"}


@pytest.fixture
def watcher(tmp_path) -> Watcher:
    return Watcher(tmp_path)


def upkeep_for(watcher, lock=None, **settings) -> Upkeep:
    return Upkeep(UpkeepSettings(**settings), watcher, recovery_lock=lock, timezone=UTC)


def make_checkpoints(watcher: Watcher, steps, verified) -> None:
    for step in steps:
        ckpt = make_ckpt(watcher.out_dir, step, side_files=("model_config.yaml", "hyperparameters.yaml"))
        announce(watcher.run_dir / "logs", ckpt)  # the trainer's "Saving checkpoint to" line
        if step in verified:
            assert seal_checkpoint(ckpt).ok  # as the supervisor seals what it verified
            watcher.verified.add(step)


def steps_left(watcher: Watcher) -> list[int]:
    return [c.step for c in list_checkpoints(watcher.out_dir, adapter_for("litgpt").layout)]


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


# --- settings and triggers -------------------------------------------------------------------------
def test_settings_validate_and_null_switches_a_job_off(watcher):
    with pytest.raises(pydantic.ValidationError, match="HH:MM"):
        UpkeepSettings(digest_time="25:00")
    with pytest.raises(pydantic.ValidationError):
        UpkeepSettings(heartbeat_interval_s=0)
    with pytest.raises(pydantic.ValidationError):
        UpkeepSettings(cleanup=True)
    assert set(upkeep_for(watcher).triggers(FIXED_NOW)) == {"heartbeat", "retention", "gzip_logs"}
    only = upkeep_for(watcher, retention_interval_s=None, log_gzip_interval_s=None, digest_enabled=True)
    assert set(only.triggers(FIXED_NOW)) == {"heartbeat", "digest"}


def test_triggers_fire_at_the_configured_times(watcher):
    upkeep = upkeep_for(watcher, heartbeat_interval_s=30, retention_interval_s=120, log_gzip_interval_s=3600,
                        digest_enabled=True, digest_time="09:30")
    triggers = upkeep.triggers(FIXED_NOW)
    first = triggers["heartbeat"].get_next_fire_time(None, FIXED_NOW)
    assert first == FIXED_NOW + dt.timedelta(seconds=30)
    assert triggers["heartbeat"].get_next_fire_time(first, first) == FIXED_NOW + dt.timedelta(seconds=60)
    assert triggers["retention"].get_next_fire_time(None, FIXED_NOW) == FIXED_NOW + dt.timedelta(minutes=2)
    assert triggers["gzip_logs"].get_next_fire_time(None, FIXED_NOW) == FIXED_NOW + dt.timedelta(hours=1)
    digest = triggers["digest"]
    assert digest.get_next_fire_time(None, FIXED_NOW) == FIXED_NOW.replace(hour=9, minute=30)
    after = FIXED_NOW.replace(hour=10)
    assert digest.get_next_fire_time(None, after) == (FIXED_NOW + dt.timedelta(days=1)).replace(hour=9, minute=30)


# --- the jobs, called directly ---------------------------------------------------------------------
def test_retention_keeps_exactly_best_and_newest_k(watcher):
    make_checkpoints(watcher, (10, 20, 30, 40, 50, 60), verified={10, 20, 30, 40, 50, 60})
    watcher.best = 20
    run = upkeep_for(watcher).retention()
    assert run.status == "ok", run.summary
    assert steps_left(watcher) == [20, 50, 60]
    assert upkeep_for(watcher).retention().summary.startswith("deleted 0 checkpoint(s)")


def test_retention_never_touches_the_newest_verified_or_unverified_ones(watcher):
    watcher.keep_last_k = 1
    make_checkpoints(watcher, (10, 20, 30, 40, 50, 60), verified={10, 20, 30, 50})
    run = upkeep_for(watcher).retention()
    assert run.status == "ok", run.summary
    # newest 1 = 60 (unverified, maybe being written), 50 = the resume point, 40 = unverified
    assert steps_left(watcher) == [40, 50, 60]


def test_heartbeat_is_valid_json_written_atomically(watcher):
    run = upkeep_for(watcher).heartbeat()
    assert run.status == "ok", run.summary
    beat = json.loads((watcher.run_dir / HEARTBEAT_NAME).read_text())
    assert beat["step"] == 31 and beat["trainer_alive"] is False and beat["watcher_pid"] == os.getpid()
    assert beat["disk"]["free_bytes"] > 0 and beat["disk"]["total_bytes"] >= beat["disk"]["free_bytes"]
    assert abs(beat["time"] - time.time()) < 60 and beat["status"]["run_state"] == "running"
    assert sorted(p.name for p in watcher.run_dir.iterdir()) == [HEARTBEAT_NAME]  # no temp file left


def test_gzip_compresses_only_finished_logs(watcher):
    logs = watcher.run_dir / "logs"
    logs.mkdir()
    finished, current = logs / "trainer-001.log", logs / "trainer-002.log"
    finished.write_text("Epoch 1 | iter 1 step 1 | loss train: 6.2\n" * 500)
    current.write_text("Epoch 1 | iter 9 step 9 | loss train: 5.1\n")
    watcher.alive, watcher.log = True, current
    run = upkeep_for(watcher).gzip_logs()
    assert run.status == "ok" and "compressed 1 finished log(s)" in run.summary
    assert sorted(p.name for p in logs.iterdir()) == ["trainer-001.log.gz", "trainer-002.log"]
    assert gzip.decompress((logs / "trainer-001.log.gz").read_bytes()).decode().count("step 1 |") == 500
    # A live trainer whose log the watcher does not know (re-attach): its newest log is left alone too.
    watcher.log = None
    assert upkeep_for(watcher).gzip_logs().summary.startswith("compressed 0")
    assert current.exists()
    watcher.alive = False  # the trainer is gone: now every log is finished
    assert upkeep_for(watcher).gzip_logs().summary.startswith("compressed 1")
    assert sorted(p.name for p in logs.iterdir()) == ["trainer-001.log.gz", "trainer-002.log.gz"]


def test_digest_sums_the_last_day_of_incidents(watcher):
    now = time.time()
    folder = watcher.run_dir / "incidents"
    folder.mkdir()
    for n, (age, outcome, lost) in enumerate([(3600, "recovered", 7), (7200, "escalated", None),
                                              (3 * 86400, "recovered", 99)], start=1):
        record = {"id": f"incident-{n}", "opened_at": now - age, "outcome": outcome, "steps_lost": lost,
                  "tokens_lost": lost * 1024 if lost else None, "recovery_seconds": 20.0}
        (folder / f"incident-{n}.json").write_text(json.dumps(record))
    (folder / "incident-4.json").write_text("{torn")  # skipped, not fatal
    run = upkeep_for(watcher, digest_enabled=True).digest()
    assert run.status == "ok", run.summary
    [(title, text, fields)] = watcher.notifier.digests
    assert title == "Training digest"
    assert fields["incidents (24 h)"] == "1 escalated, 1 recovered"
    assert fields["lost compute (24 h)"] == "7 steps, 7,168 tokens, 40 s recovering"
    assert fields["step"] == "31" and fields["tokens/s"] == "9,123"
    assert "2 incident(s) in 24 h" in text
    assert digest_message({}, [], now)[2]["incidents (24 h)"] == "none"


def test_digest_goes_to_slack_as_a_top_level_message(watcher, tmp_path, monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with FakeSlack() as slack:
        settings = SlackSettings(enabled=True, channel="#training", base_url=slack.api_base, timeout_s=1.0)
        notifier = SlackNotifier(settings, tmp_path / "outbox", token="xoxb-test-token", backoff_s=0.02)
        try:
            watcher.notifier = notifier
            assert upkeep_for(watcher, digest_enabled=True).digest().status == "ok"
            notifier.flush(5)
        finally:
            notifier.close(timeout_s=0)
        [post] = slack.delivered()
    assert "thread_ts" not in post.body and post.body["channel"] == "#training"
    assert post.body["blocks"][0]["text"]["text"] == "Training digest"
    assert "Daily digest: step 31" in post.body["text"]


def test_jobs_skip_while_a_recovery_holds_the_lock(watcher):
    make_checkpoints(watcher, (10, 20, 30, 40), verified={10, 20, 30, 40})
    (watcher.run_dir / "logs" / "trainer-001.log").write_text("old\n")
    lock = threading.Lock()
    upkeep = upkeep_for(watcher, lock=lock, digest_enabled=True)
    before = tree(watcher.run_dir.parent.parent)
    with lock:
        runs = [upkeep.heartbeat(), upkeep.retention(), upkeep.gzip_logs(), upkeep.digest()]
    assert [r.status for r in runs] == ["skipped"] * 4
    assert tree(watcher.run_dir.parent.parent) == before and watcher.notifier.digests == []
    assert upkeep.last["retention"].summary == "a recovery is in progress"
    assert upkeep.retention().status == "ok" and steps_left(watcher) == [30, 40]
    assert not lock.locked()  # released after the run


def test_a_failing_job_is_reported_and_releases_the_lock(watcher):
    events = []
    lock = threading.Lock()
    watcher.best_step = lambda: 1 / 0  # a bug in the supervisor's side
    upkeep = Upkeep(UpkeepSettings(), watcher, recovery_lock=lock, events=events.append)
    run = upkeep.retention()
    assert run.status == "error" and "ZeroDivisionError" in run.summary
    assert not lock.locked() and WatchWarning(f"upkeep retention failed: {run.summary}") in events


# --- the scheduler ---------------------------------------------------------------------------------
def test_start_runs_heartbeat_at_once_and_shutdown_is_clean_and_idempotent(watcher):
    upkeep = upkeep_for(watcher, heartbeat_interval_s=3600, retention_interval_s=3600, log_gzip_interval_s=None,
                        digest_enabled=True)
    upkeep.shutdown()  # before start: nothing to stop
    upkeep = upkeep_for(watcher, heartbeat_interval_s=3600, retention_interval_s=3600, log_gzip_interval_s=None,
                        digest_enabled=True)
    upkeep.start()
    upkeep.start()  # a second start is ignored
    try:
        jobs = {job.id: job for job in upkeep._scheduler.get_jobs()}
        assert set(jobs) == {"heartbeat", "retention", "digest"}
        assert all(job.coalesce and job.max_instances == 1 for job in jobs.values())
        deadline = time.monotonic() + 5
        while "heartbeat" not in upkeep.last and time.monotonic() < deadline:
            time.sleep(0.02)
        assert upkeep.last["heartbeat"].status == "ok"
        assert (watcher.run_dir / HEARTBEAT_NAME).is_file()
    finally:
        upkeep.shutdown()
    assert not upkeep.running
    upkeep.shutdown()  # APScheduler's own shutdown raises the second time; ours does not
    upkeep.start()     # never restarted after shutdown
    assert not upkeep.running
    assert not [t for t in threading.enumerate() if t.name.startswith("APScheduler")]


def test_supervisor_context_reads_a_real_supervisor(tmp_path):
    import shutil

    from engine.watch.supervisor import Supervisor
    from engine.watch.upkeep import SupervisorPorts
    from engine.trainers.run_config import load_config

    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "configs").mkdir()
    shutil.copy(repo / "configs" / "run_config.yaml", tmp_path / "configs" / "run_config.yaml")
    loaded = load_config(tmp_path / "configs" / "run_config.yaml")
    supervisor = Supervisor(loaded, [], RecordingNotifier(), "sha256:test")
    ports = SupervisorPorts(supervisor.parts)
    assert (ports.run_dir, ports.out_dir) == (loaded.run_dir, loaded.out_dir)
    assert ports.keep_last_k == loaded.config.keep_last_k == 3
    assert not ports.trainer_alive() and ports.current_log() is None and ports.best_step() is None
    assert ports.status() == {"run_state": "starting", "launches": 0, "step": None, "tokens": None,
                                "tokens_per_sec": None}
    for step in (10, 20, 30, 40, 50):
        announce(loaded.run_dir / "logs", make_ckpt(loaded.out_dir, step, side_files=("model_config.yaml", "hyperparameters.yaml")))
    supervisor.catalog.refresh(force=True)  # seals them, as the watcher does
    assert ports.catalog.verified == {10, 20, 30, 40, 50}
    upkeep = Upkeep(UpkeepSettings(), ports)
    assert upkeep.retention().status == "ok" and [c.step for c in list_checkpoints(loaded.out_dir, adapter_for(loaded.config.trainer.kind).layout)] == [30, 40, 50]
    assert upkeep.heartbeat().status == "ok" and (loaded.run_dir / HEARTBEAT_NAME).is_file()
