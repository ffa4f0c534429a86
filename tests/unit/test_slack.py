"""SlackNotifier and Outbox against a real HTTP fake Slack, with the real slack_sdk."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pydantic
import pytest

from runbook.outbox import Outbox
from runbook.slack import NullNotifier, Notifier, SlackNotifier, SlackSettings, make_notifier
from tests.fake_slack import FakeSlack

TOKEN = "xoxb-1111-2222-SECRETsecretSECRET"
WEBHOOK_SECRET = "T000/B000/WEBHOOKsecretWEBHOOK"
MENTION = "<!subteam^S0123>"
FAST = {"backoff_s": 0.02, "max_backoff_s": 0.1}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # slack_sdk routes through $HTTP(S)_PROXY and ignores NO_PROXY.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def slack():
    with FakeSlack() as fake:
        yield fake


@pytest.fixture
def notifiers():
    made: list[SlackNotifier] = []
    yield made
    for notifier in made:
        notifier.close(timeout_s=0)


def bot_notifier(slack: FakeSlack, outbox: Path, made: list, **kwargs) -> SlackNotifier:
    settings = SlackSettings(enabled=True, channel="#incidents", mention=MENTION, base_url=slack.api_base,
                             timeout_s=1.0)
    notifier = SlackNotifier(settings, outbox, token=TOKEN, **{**FAST, **kwargs})
    made.append(notifier)
    return notifier


def texts(requests) -> list[str]:
    return [r.body["text"] for r in requests]


def all_file_text(root: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


def test_one_thread_per_incident_with_blocks_and_mention(slack, tmp_path, notifiers):
    n = bot_notifier(slack, tmp_path / "outbox", notifiers)
    n.incident_opened("inc-1", "NaN loss", "loss went <nan> at step 40", {"run": "tiny", "step": "40"})
    n.incident_opened("inc-2", "Disk full", "out_dir is full", {})
    n.incident_update("inc-1", "rolled back to step-30")
    n.incident_update("inc-2", "cleaned partial checkpoint")
    n.incident_update("inc-1", "resumed")
    n.incident_closed("inc-2", "recovered", "lost 12 s", escalate=False)
    n.incident_closed("inc-1", "gave up", "third NaN in a row", escalate=True)
    n.flush(5)

    posts = slack.delivered()
    assert len(posts) == 7 and n.pending_count() == 0
    open1, open2 = posts[0], posts[1]
    for parent in (open1, open2):
        assert "thread_ts" not in parent.body
        assert parent.body["blocks"][0]["type"] == "header"
        assert parent.body["text"]  # plain-text fallback next to the blocks
    assert "&lt;nan&gt;" in json.dumps(open1.body["blocks"])  # mrkdwn escaped
    assert any(b.get("fields") for b in open1.body["blocks"])
    thread = {"inc-1": open1.response["ts"], "inc-2": open2.response["ts"]}
    replies = posts[2:]
    assert [r.body["thread_ts"] for r in replies] == [thread[i] for i in ("inc-1", "inc-2", "inc-1", "inc-2", "inc-1")]
    assert all(r.body["channel"] == open1.response["channel"] for r in replies)
    assert all(r.body["blocks"] for r in replies)
    assert texts(replies)[:3] == ["rolled back to step-30", "cleaned partial checkpoint", "resumed"]
    calm, escalation = replies[3], replies[4]
    assert MENTION not in json.dumps(calm.body) and not calm.body.get("reply_broadcast")
    assert escalation.body["text"].startswith(MENTION)
    assert MENTION in json.dumps(escalation.body["blocks"])
    assert escalation.body["reply_broadcast"] is True
    # Parents' ts are persisted for a later process.
    state = json.loads((tmp_path / "outbox" / "state.json").read_text())
    assert state["thread:inc-1"]["ts"] == thread["inc-1"]


def test_token_never_leaves_the_authorization_header(slack, tmp_path, notifiers, caplog):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="runbook.slack.sdk")  # worst case: slack_sdk's request dumps
    outbox = tmp_path / "outbox"
    slack.outage("refuse")  # makes slack_sdk log its connection errors and retries
    n = bot_notifier(slack, outbox, notifiers)
    n.incident_opened("inc-1", "NaN loss", "summary", {"k": "v"})
    n.incident_update("inc-1", "update")
    time.sleep(0.2)
    assert TOKEN not in all_file_text(outbox)
    slack.recover()
    slack.outage("503", seconds=0.2)
    n.incident_closed("inc-1", "failed", "summary", escalate=True)
    n.flush(5)
    n.close()

    assert len(slack.delivered()) == 3
    assert "Failed to send a request" in caplog.text  # the failure path really was logged
    assert TOKEN not in caplog.text
    assert TOKEN not in all_file_text(outbox)
    for req in slack.snapshot():
        headers = {k.lower(): v for k, v in req.headers.items()}
        assert headers["authorization"] == f"Bearer {TOKEN}"
        del headers["authorization"]
        assert TOKEN not in json.dumps([req.path, headers, req.body])


@pytest.mark.parametrize("mode", ["503", "refuse"])
def test_outage_never_blocks_callers_and_delivers_in_order(slack, tmp_path, notifiers, mode):
    slack.outage(mode)
    n = bot_notifier(slack, tmp_path / "outbox", notifiers)
    expected = []
    worst = 0.0
    for i in range(20):
        start = time.perf_counter()
        if i == 0:
            n.incident_opened("inc-1", "Hang", "no progress for 300 s", {"pid": "123"})
        else:
            n.incident_update("inc-1", f"update {i}")
            expected.append(f"update {i}")
        worst = max(worst, time.perf_counter() - start)
    # An enqueue is a local fsynced write; the Slack timeout it must never wait for is 3 s. The bound
    # leaves room for a busy 2-core CI machine while still proving no network call is in the way.
    assert worst < 0.5, f"an enqueue took {worst * 1000:.1f} ms"
    time.sleep(0.3)  # let the sender fail a few times
    assert slack.delivered() == [] and n.pending_count() == 20
    if mode == "503":
        assert sum(r.status == 503 for r in slack.snapshot()) >= 2

    slack.recover()
    n.flush(5)
    posts = slack.delivered()
    assert n.pending_count() == 0
    assert posts[0].body["text"].startswith("Incident inc-1 opened: Hang")
    assert texts(posts[1:]) == expected  # strictly in order, nothing duplicated
    assert {r.body["thread_ts"] for r in posts[1:]} == {posts[0].response["ts"]}


def test_a_failed_message_is_never_overtaken(slack, tmp_path, notifiers):
    n = bot_notifier(slack, tmp_path / "outbox", notifiers)
    slack.fail_next(3)  # the open fails three times while the updates are already queued
    n.incident_opened("inc-1", "Loss spike", "summary", {})
    for i in range(5):
        n.incident_update("inc-1", f"update {i}")
    n.flush(5)
    assert [r.status for r in slack.snapshot()] == [503] * 3 + [200] * 6
    posts = slack.delivered()
    assert texts(posts[1:]) == [f"update {i}" for i in range(5)]
    assert {r.body["thread_ts"] for r in posts[1:]} == {posts[0].response["ts"]}


def test_rate_limit_is_retried_by_slack_sdk(slack, tmp_path, notifiers):
    slack.rate_limit_next(1, retry_after=1)
    n = bot_notifier(slack, tmp_path / "outbox", notifiers)
    start = time.monotonic()
    n.incident_opened("inc-1", "OOM", "summary", {})
    n.flush(5)
    assert [r.status for r in slack.snapshot()] == [429, 200]
    assert time.monotonic() - start >= 1.0  # Retry-After was honoured
    assert n.pending_count() == 0


def test_rate_limit_beyond_sdk_retries_stays_queued_then_delivers(slack, tmp_path, notifiers):
    slack.rate_limit_next(4, retry_after=0)  # slack_sdk retries twice, then our own backoff takes over
    n = bot_notifier(slack, tmp_path / "outbox", notifiers)
    n.incident_opened("inc-1", "OOM", "summary", {})
    n.incident_update("inc-1", "halved micro-batch")
    n.flush(8)
    statuses = [r.status for r in slack.snapshot()]
    assert statuses[:4] == [429] * 4 and statuses[4:] == [200, 200]
    posts = slack.delivered()
    assert posts[1].body["thread_ts"] == posts[0].response["ts"]


def test_restart_delivers_pending_messages_under_the_right_parents(slack, tmp_path, notifiers):
    outbox = tmp_path / "outbox"
    first = bot_notifier(slack, outbox, notifiers)
    first.incident_opened("old", "Loss spike", "delivered before the outage", {})
    first.flush(5)
    old_ts = slack.delivered()[0].response["ts"]

    slack.outage("refuse")
    first.incident_update("old", "old: still spiking")
    first.incident_opened("new", "Disk full", "queued during the outage", {})
    first.incident_update("new", "new: freed space")
    first.incident_closed("old", "rolled back", "ok", escalate=False)
    first.incident_closed("new", "escalated", "needs a human", escalate=True)
    start = time.monotonic()
    first.close(timeout_s=0.2)
    assert time.monotonic() - start < 2.5  # bounded even with Slack down
    assert len(Outbox(outbox).pending()) == 5

    slack.recover()
    second = bot_notifier(slack, outbox, notifiers)
    second.flush(5)
    posts = slack.delivered()[1:]
    assert texts(posts)[0] == "old: still spiking" and posts[0].body["thread_ts"] == old_ts
    assert posts[1].body["text"].startswith("Incident new opened")
    new_ts = posts[1].response["ts"]
    assert [r.body.get("thread_ts") for r in posts[2:]] == [new_ts, old_ts, new_ts]
    assert texts(posts[2:3]) == ["new: freed space"] and MENTION in posts[4].body["text"]
    assert second.pending_count() == 0


def test_webhook_mode_delivers_and_keeps_the_url_out_of_logs(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="runbook.slack.sdk")
    with FakeSlack(webhook_path=f"/webhook/{WEBHOOK_SECRET}") as slack:
        settings = SlackSettings(enabled=True, timeout_s=1.0)
        env = {settings.webhook_url_env: slack.webhook_url}
        n = make_notifier(settings, tmp_path / "outbox", environ=env, **FAST)
        try:
            assert isinstance(n, SlackNotifier)
            slack.outage("refuse")
            n.incident_opened("inc-1", "NaN loss", "summary", {"run": "tiny"})
            time.sleep(0.1)
            slack.recover()
            slack.rate_limit_next(1, retry_after=0)
            n.incident_update("inc-1", "rolled back")
            n.incident_closed("inc-1", "recovered", "ok", escalate=False)
            n.flush(5)
        finally:
            n.close()
        posts = slack.delivered(slack.webhook_path)
    assert texts(posts)[1:] == ["rolled back", ":white_check_mark: *Closed*: recovered\nok"]
    assert all(r.body["blocks"] and "thread_ts" not in r.body for r in posts)
    assert "Going to retry" in caplog.text
    assert WEBHOOK_SECRET not in caplog.text
    assert WEBHOOK_SECRET not in all_file_text(tmp_path / "outbox")


def test_rejected_blocks_fall_back_to_text(slack, tmp_path, notifiers):
    slack.reject_blocks = True
    n = bot_notifier(slack, tmp_path / "outbox", notifiers)
    n.incident_opened("inc-1", "NaN loss", "summary", {})
    n.incident_update("inc-1", "rolled back")
    n.flush(5)
    posts = slack.delivered()
    assert [("blocks" in r.body) for r in posts] == [False, False]
    assert posts[1].body["thread_ts"] == posts[0].response["ts"]


def test_make_notifier(tmp_path, notifiers):
    assert isinstance(make_notifier(SlackSettings(), tmp_path, environ={}), NullNotifier)
    enabled = SlackSettings(enabled=True, channel="#incidents")
    with pytest.raises(ValueError, match=r"RUNBOOK_SLACK_BOT_TOKEN.*RUNBOOK_SLACK_WEBHOOK_URL"):
        make_notifier(enabled, tmp_path, environ={})
    with pytest.raises(ValueError, match="channel"):
        make_notifier(SlackSettings(enabled=True), tmp_path, environ={"RUNBOOK_SLACK_BOT_TOKEN": TOKEN})
    custom = SlackSettings(enabled=True, channel="#x", bot_token_env="MY_TOKEN", base_url="http://127.0.0.1:9/api")
    try:
        make_notifier(custom, tmp_path, environ={"RUNBOOK_SLACK_BOT_TOKEN": TOKEN})
    except ValueError as exc:
        assert "MY_TOKEN" in str(exc) and TOKEN not in str(exc)
    else:
        pytest.fail("expected ValueError")
    n = make_notifier(custom, tmp_path, environ={"MY_TOKEN": TOKEN})
    notifiers.append(n)
    assert isinstance(n, SlackNotifier) and isinstance(n, Notifier)
    assert TOKEN not in repr(n)
    with pytest.raises(pydantic.ValidationError):
        SlackSettings(enabled=True, token=TOKEN)  # tokens never come from config files


def test_outbox_is_ordered_atomic_and_persistent(tmp_path):
    box = Outbox(tmp_path)
    ids = [box.put({"n": i}) for i in range(12)]
    assert ids == sorted(ids) and len(set(ids)) == 12
    box.done(ids[0])
    (tmp_path / ".runbook-tmp-leftover.part").write_text('{"half": ')  # a crash mid-write
    assert [m["n"] for _, m in box.pending()] == list(range(1, 12))
    box.state_set("thread:a", {"ts": "1.0"})
    for i in range(5):
        box.state_set(f"k{i}", i, max_keys=3)

    reopened = Outbox(tmp_path)
    assert not any(p.name.startswith(".runbook-tmp-") for p in tmp_path.iterdir())
    assert reopened.put({"n": 99}) > ids[-1]  # numbering continues after a restart
    assert [m["n"] for _, m in reopened.pending()][-2:] == [11, 99]
    assert reopened.state_get("k4") == 4 and reopened.state_get("thread:a") is None  # oldest dropped
    (tmp_path / "000000000000.json").write_text("{not json")  # bit rot is parked, not blocking
    assert reopened.pending()[0][1] == {"n": 1}
    assert (tmp_path / "failed" / "000000000000.json").exists()
    assert sorted(os.listdir(tmp_path)) == sorted(
        [f"{int(i):012d}.json" for i in ids[1:]] + [f"{13:012d}.json", "state.json", "failed"])
