"""Notices a watcher could not deliver (Slack down) are delivered later, in order and in their threads.

Real slack_sdk against the fake Slack HTTP server on 127.0.0.1; a real `runbook watch` trains (the toy
trainer), is preempted (SIGTERM to the trainer), recovers and completes while Slack answers 500 after the
incident's first message. `runbook status` counts what is pending; then, Slack up again, both
`runbook notify --flush` and a later `runbook watch` on the completed run deliver it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from runbook.outbox import Outbox
from runbook.slack import SlackNotifier, SlackSettings
from tests.conftest import REPO, RUNBOOK, make_toy_project, stop_process, wait_for
from tests.fake_slack import FakeSlack

TOKEN = "xoxb-test-notices-token"
ENV = {"RB_TEST_TOKEN": TOKEN, "PYTHONPATH": str(REPO)}   # PYTHONPATH: every command reading the config imports the toy


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, *args], capture_output=True, text=True, timeout=180, env={**os.environ, **ENV})


def queued(outbox: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(outbox.glob("[0-9]*.json"))]


def slack_config(slack: FakeSlack, delivery_timeout_s: float = 1.0) -> dict:
    return {"slack": {"enabled": True, "base_url": slack.api_base, "channel": "#training",
                      "bot_token_env": "RB_TEST_TOKEN", "timeout_s": 1.0, "delivery_timeout_s": delivery_timeout_s}}


def assert_delivered_in_order_and_thread(posts, expected: list[dict], parent_ts: dict[str, str]) -> None:
    assert [p.body["text"] for p in posts] == [m["text"] for m in expected]
    parent_ts = dict(parent_ts)
    for post, message in zip(posts, expected):
        if message["kind"] == "open":
            parent_ts[message["incident_id"]] = post.response["ts"]
        elif message["kind"] in ("update", "close"):
            assert post.body.get("thread_ts") == parent_ts[message["incident_id"]], post.body


@pytest.fixture(scope="module")
def run_with_slack_down(tmp_path_factory):
    """A real preempted-and-recovered run whose Slack went down after the incident's first message."""
    slack = FakeSlack()
    slack.start()
    # Paced so that the trainer still trains (20 steps, 4 s) after checkpoint 20.
    project = make_toy_project(tmp_path_factory.mktemp("notices") / "project", step_seconds=0.2)
    project.set(notifications=slack_config(slack))
    slack.outage_after(1, "500")
    watcher = project.watch(env=ENV)
    try:
        wait_for(lambda: project.saved(20), 120, what="checkpoint 20")
        os.kill(project.trainer_pid(), signal.SIGTERM)
        assert watcher.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    yield project, slack
    slack.stop()


def test_pending_notices_are_counted_then_flushed_in_order_and_in_their_threads(run_with_slack_down, tmp_path):
    project, slack = run_with_slack_down
    outbox = project.run_dir / "outbox"
    [opened] = slack.delivered()            # the incident's first message got through, then Slack went down
    parent_ts = {opened.body["text"].split()[1]: opened.response["ts"]}
    pending = queued(outbox)
    assert len(pending) >= 2 and set(parent_ts) <= {m["incident_id"] for m in pending}
    # Keep a copy of the project in this state for the `watch` test below.
    shutil.copytree(project.root, tmp_path / "copy", symlinks=True)

    status = run("status", str(project.config))
    assert f"notices   {len(pending)} pending" in status.stdout, status.stdout + status.stderr
    data = json.loads(run("status", str(project.config), "--json").stdout)
    assert data["notices"]["pending"] == len(pending) and data["notices"]["oldest_queued_at"] == pending[0]["queued_at"]

    still_down = run("notify", str(project.config), "--flush", "--timeout", "1")
    assert still_down.returncode == 11 and f"{len(pending)} still pending" in still_down.stdout
    assert len(queued(outbox)) == len(pending)

    slack.recover()
    before = len(slack.delivered())
    flushed = run("notify", str(project.config), "--flush")
    assert flushed.returncode == 0 and f"delivered {len(pending)} notice(s)" in flushed.stdout, flushed.stderr
    assert_delivered_in_order_and_thread(slack.delivered()[before:], pending, parent_ts)
    assert queued(outbox) == [] and "\nnotices " not in run("status", str(project.config)).stdout

    # The same notices, still pending in the copy, go out through a later `runbook watch` on the completed run.
    copy_config = tmp_path / "copy" / "configs" / "run_config.yaml"
    before = len(slack.delivered())
    watch = run("watch", str(copy_config))
    assert watch.returncode == 0 and "nothing to do" in watch.stderr, watch.stderr
    assert f"delivered {len(pending)} notice(s)" in watch.stderr
    assert_delivered_in_order_and_thread(slack.delivered()[before:], pending, parent_ts)
    assert queued(tmp_path / "copy" / "runs" / "pretrain" / "outbox") == []


def test_notices_queued_while_slack_was_not_listening_are_flushed(project, tmp_path):
    """Slack refusing connections (not listening): nothing lost; `notify --flush` later sends all, threaded."""
    with FakeSlack() as slack:
        project.set(notifications=slack_config(slack))
        slack.outage("refuse")
        settings = SlackSettings(enabled=True, channel="#training", base_url=slack.api_base, timeout_s=1.0)
        notifier = SlackNotifier(settings, project.run_dir / "outbox", token=TOKEN, backoff_s=0.05)
        notifier.incident_opened("incident-1", "preemption", "SIGTERM", {})
        notifier.incident_opened("incident-2", "oom", "CUDA OOM", {})
        notifier.incident_update("incident-1", "resume: relaunched")
        notifier.incident_closed("incident-2", "escalated", "no memory left", escalate=True)
        notifier.incident_closed("incident-1", "recovered", "5 steps lost", escalate=False)
        notifier.close(timeout_s=0.3)
        pending = queued(project.run_dir / "outbox")
        assert len(pending) == 5

        assert run("notify", str(project.config)).stdout.startswith("5 notice(s) pending")
        slack.recover()
        flushed = run("notify", str(project.config), "--flush")
        assert flushed.returncode == 0, flushed.stdout + flushed.stderr
        posts = slack.delivered()
        parent_ts = {"incident-1": posts[0].response["ts"], "incident-2": posts[1].response["ts"]}
        assert_delivered_in_order_and_thread(posts, pending, parent_ts)
        assert posts[3].body.get("reply_broadcast") is True
        assert Outbox(project.run_dir / "outbox").pending() == []


def test_notify_refuses_while_slack_is_disabled(project):
    Outbox(project.run_dir / "outbox").put({"kind": "digest", "incident_id": "digest", "text": "x", "queued_at": 1.0})
    result = run("notify", str(project.config), "--flush")
    assert result.returncode == 3 and "notifications.slack.enabled is false" in result.stderr
