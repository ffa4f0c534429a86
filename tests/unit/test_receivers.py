"""The notification receivers beyond Slack (runbook/receivers.py, webhook.py, email_receiver.py) against
real local servers: an HTTP server on 127.0.0.1 that fails once, an SMTP server on a socket; routing by
severity and playbook; the trainer's environment scrubbed of every receiver's secrets."""

from __future__ import annotations

import json
import os
import socketserver
import threading
import time
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pydantic
import pytest

from engine.core.notifier import IncidentLabels, NotificationSettings, NullNotifier
from engine.core.run_folder import RunFolder
from engine.process.trainer_env import trainer_environment
from runbook.receivers import RoutingNotifier, make_notifier

FAST = {"backoff_s": 0.02, "max_backoff_s": 0.1}
CRITICAL = IncidentLabels("critical", "nan_loss")
WARNING = IncidentLabels("warning", "slow_throughput")


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


class Hook:
    """An HTTP endpoint on 127.0.0.1: records every POST, answers 500 to the first `fail` of them."""

    def __init__(self, fail: int = 0) -> None:
        self.fail, self.received, self.attempts = fail, [], 0
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:   # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.attempts += 1
                if hook.fail:
                    hook.fail -= 1
                    self.send_response(500)
                else:
                    hook.received.append((self.headers.get("Authorization"), json.loads(body)))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None: ...

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Smtp:
    """Just enough of an SMTP server (RFC 5321) on 127.0.0.1 to receive mails."""

    def __init__(self) -> None:
        self.mails: list[tuple[str, list[str], Message]] = []
        smtp = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                def say(line: str) -> None:
                    self.wfile.write(line.encode() + b"\r\n")

                say("220 test ESMTP")
                sender, recipients = "", []
                while line := self.rfile.readline():
                    verb = line.decode().strip().split(" ", 1)[0].upper()
                    if verb in ("EHLO", "HELO"):
                        say("250 test")
                    elif verb == "MAIL":
                        sender, recipients = line.decode().split(":", 1)[1].strip(), []
                        say("250 ok")
                    elif verb == "RCPT":
                        recipients.append(line.decode().split(":", 1)[1].strip())
                        say("250 ok")
                    elif verb == "DATA":
                        say("354 go ahead")
                        data = b""
                        while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                            data += chunk[1:] if chunk.startswith(b"..") else chunk
                        smtp.mails.append((sender, recipients, message_from_bytes(data)))
                        say("250 queued")
                    elif verb == "QUIT":
                        say("221 bye")
                        return
                    else:
                        say("250 ok")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    server = Hook(fail=1)
    yield server
    server.close()


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_webhook_gets_the_critical_incident_once_after_a_500_and_never_the_warning(hook, tmp_path):
    settings = NotificationSettings.model_validate({"receivers": [
        {"name": "pager", "kind": "webhook", "url_env": "PAGER_URL", "token_env": "PAGER_TOKEN",
         "match": {"severities": ["critical"]}}]})
    notifier = make_notifier(settings, tmp_path / "outbox", {"PAGER_URL": hook.url, "PAGER_TOKEN": "s3cret"}, **FAST)
    try:
        notifier.incident_opened("inc-1", "nan_loss (critical)", "loss is nan", {"step": "40"}, labels=CRITICAL)
        notifier.incident_opened("inc-2", "slow_throughput (warning)", "half speed", {}, labels=WARNING)
        notifier.incident_update("inc-1", "rollback: to step 20")
        notifier.incident_update("inc-2", "profile: done")
        notifier.incident_closed("inc-1", "recovered", "resumed at 20", escalate=False, labels=CRITICAL)
        notifier.incident_closed("inc-2", "recovered", "", escalate=False, labels=WARNING)
        notifier.flush(10)
    finally:
        notifier.close(0)
    events = [(body["event"], body["incident_id"]) for _, body in hook.received]
    assert events == [("incident_opened", "inc-1"), ("incident_update", "inc-1"), ("incident_closed", "inc-1")]
    assert hook.attempts == 4   # the first POST got the 500 and was sent again: delivered exactly once
    opened = hook.received[0][1]
    assert opened["title"] == "nan_loss (critical)" and opened["severity"] == "critical"
    assert opened["playbook"] == "nan_loss" and opened["fields"] == {"step": "40"}
    assert {auth for auth, _ in hook.received} == {"Bearer s3cret"}
    assert not list((tmp_path / "outbox" / "pager").glob("*.json"))   # nothing left queued


def test_the_default_route_gets_only_what_no_receiver_matched(tmp_path):
    settings = NotificationSettings.model_validate({"default_receiver": "rest", "receivers": [
        {"name": "nan", "kind": "webhook", "url": "http://127.0.0.1:9/nan", "match": {"playbooks": ["nan_loss"]}},
        {"name": "rest", "kind": "webhook", "url": "http://127.0.0.1:9/rest"}]})
    notifier = make_notifier(settings, tmp_path / "outbox", {}, **FAST)
    try:
        assert isinstance(notifier, RoutingNotifier)
        names = {id(n): s.name for n, s in notifier.routes if s is not None}
        assert [names[id(n)] for n in notifier.receivers_for(CRITICAL)] == ["nan"]
        assert [names[id(n)] for n in notifier.receivers_for(WARNING)] == ["rest"]
        assert [names[id(n)] for n in notifier.receivers_for(None)] == ["rest"]   # labels unknown: the default
    finally:
        notifier.close(0)


def test_an_email_arrives_with_the_incident_title(tmp_path, monkeypatch):
    server = Smtp()
    settings = NotificationSettings.model_validate({"receivers": [
        {"name": "oncall", "kind": "email", "host": "127.0.0.1", "port": server.port, "starttls": False,
         "from": "runbook@example.org", "to": ["oncall@example.org", "lead@example.org"]}]})
    notifier = make_notifier(settings, tmp_path / "outbox", {}, **FAST)
    try:
        notifier.incident_opened("inc-7", "nan_loss (critical)", "loss is nan at step 40", {"step": "40"},
                                 labels=CRITICAL)
        notifier.incident_closed("inc-7", "escalated", "three rollbacks did not help", escalate=True, labels=CRITICAL)
        notifier.flush(10)
        wait_for(lambda: len(server.mails) == 2)
    finally:
        notifier.close(0)
        server.close()
    (sender, recipients, opened), (_, _, closed) = server.mails
    assert sender == "<runbook@example.org>" and recipients == ["<oncall@example.org>", "<lead@example.org>"]
    assert opened["Subject"] == "[runbook critical] inc-7: nan_loss (critical)"
    assert "loss is nan at step 40" in opened.get_payload() and "step: 40" in opened.get_payload()
    assert closed["Subject"] == "Re: [runbook critical] inc-7: nan_loss (critical)"
    assert "three rollbacks did not help" in closed.get_payload()


def test_a_receivers_secret_variables_never_reach_the_trainer(tmp_path):
    settings = NotificationSettings.model_validate({"receivers": [
        {"name": "hook", "kind": "webhook", "url_env": "OPS_HOOK_URL", "token_env": "OPS_HOOK_TOKEN"},
        {"name": "mail", "kind": "email", "host": "smtp.example.org", "from": "a@example.org", "to": ["b@example.org"],
         "username_env": "OPS_SMTP_USER", "password_env": "OPS_SMTP_PASSWORD"}]})
    secrets = {"OPS_HOOK_URL": "https://hooks.example.org/x", "OPS_HOOK_TOKEN": "t", "OPS_SMTP_USER": "u",
               "OPS_SMTP_PASSWORD": "p"}
    env = trainer_environment({**secrets, "PATH": "/usr/bin", "WANDB_RUN_ID": "kept"}, RunFolder(tmp_path), settings)
    assert not set(secrets) & set(env)
    assert env["PATH"] == "/usr/bin"   # everything else passes


def test_a_receiver_without_its_secret_variable_is_refused_in_one_sentence(tmp_path):
    settings = NotificationSettings.model_validate({"receivers": [
        {"name": "hook", "kind": "webhook", "url_env": "OPS_HOOK_URL"}]})
    with pytest.raises(ValueError, match=r"receiver 'hook': \$OPS_HOOK_URL"):
        make_notifier(settings, tmp_path / "outbox", {})


@pytest.mark.parametrize("bad", [
    {"receivers": [{"name": "x", "kind": "webhook", "url": "http://h", "password": "literal"}]},   # no such key
    {"receivers": [{"name": "x", "kind": "pager"}]},
    {"receivers": [{"name": "x", "kind": "webhook"}]},                                          # no url at all
    {"receivers": [{"name": "x", "kind": "email", "host": "h", "from": "a@b", "to": ["c@d"],
                    "password_env": "hunter2 literally"}]},
    {"receivers": [{"name": "x", "kind": "webhook", "url": "http://h", "match": {"severities": ["fatal"]}}]},
    {"default_receiver": "nobody"},
    {"receivers": [{"name": "x", "kind": "webhook", "url": "http://h"}] * 2},
])
def test_bad_receiver_settings_are_refused(bad):
    with pytest.raises(pydantic.ValidationError):
        NotificationSettings.model_validate(bad)


def test_the_slack_section_alone_still_means_one_slack_receiver(tmp_path):
    settings = NotificationSettings.model_validate({"slack": {"enabled": True, "channel": "#runs"}})
    notifier = make_notifier(settings, tmp_path / "outbox", {"RUNBOOK_SLACK_BOT_TOKEN": "xoxb-1"}, **FAST)
    try:
        assert isinstance(notifier, RoutingNotifier) and [s for _, s in notifier.routes] == [None]
        assert notifier.receivers_for(WARNING) == notifier.notifiers
    finally:
        notifier.close(0)
    assert isinstance(make_notifier(NotificationSettings(), tmp_path, {}), NullNotifier)   # nothing enabled


def test_a_receivers_unknown_key_is_reported_with_file_line_and_key(tmp_path):
    from engine.core.yaml_source import SourceError
    from engine.trainers.run_config import load_config

    path = tmp_path / "proj" / "configs" / "run_config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("notifications:\n  slack:\n    enabled: false\n  receivers:\n    - name: pager\n      kind: webhook\n"
                    "      url: http://127.0.0.1:9/x\n      match:\n        severity: [critical]\n")
    with pytest.raises(SourceError) as err:
        load_config(path)
    assert f"{path}:9:9: notifications.receivers.0.webhook.match.severity: unknown key" in str(err.value), str(err.value)


def test_status_counts_what_waits_in_every_receivers_outbox(tmp_path):
    """A webhook that answers 500 keeps its notice queued in outbox/<receiver>/; `runbook status` counts it with
    the rest (not only Slack's outbox)."""
    import subprocess

    from engine.trainers.run_config import load_config
    from tests.conftest import REPO, RUNBOOK, make_toy_project

    down = Hook(fail=10**6)
    project = make_toy_project(tmp_path / "project")
    project.set(notifications={"receivers": [{"name": "pager", "kind": "webhook", "url_env": "PAGER_URL"}]})
    loaded = load_config(project.config)
    from runbook.notices import outbox_dir

    notifier = make_notifier(loaded.config.notifications, outbox_dir(loaded), {"PAGER_URL": down.url}, **FAST)
    try:
        notifier.incident_opened("inc-1", "nan_loss (critical)", "loss is nan", {}, labels=CRITICAL)
        notifier.flush(timeout_s=0.5)
    finally:
        notifier.close(timeout_s=0.1)
        down.close()
    assert list((project.run_dir / "outbox" / "pager").glob("[0-9]*.json"))
    from engine.records.journal import Journal

    Journal(project.run_dir / "journal.jsonl").append("state", state="running", reason="a run under way")
    done = subprocess.run([RUNBOOK, "status", str(project.config), "--json"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})   # the toy trainer's adapter is tests'
    assert json.loads(done.stdout)["notices"]["pending"] == 1, done.stdout + done.stderr


def test_a_route_naming_no_playbook_of_the_run_is_refused_with_file_line(tmp_path):
    """A typo in a route (`nans`) would silently send nothing: `runbook check` (and watch, triage) refuses it."""
    import subprocess

    from tests.conftest import REPO, RUNBOOK, make_toy_project

    project = make_toy_project(tmp_path / "proj")
    project.set(notifications={"receivers": [{"name": "pager", "kind": "webhook", "url": "http://127.0.0.1:9/x",
                                              "match": {"playbooks": ["oom", "nans"]}}]})
    line = next(n for n, text in enumerate(project.config.read_text().splitlines(), 1) if "nans" in text)
    done = subprocess.run([RUNBOOK, "check", str(project.config)], capture_output=True, text=True, cwd=project.root,
                          env={**os.environ, "PYTHONPATH": str(REPO)})   # the toy trainer's adapter is tests'

    assert done.returncode != 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert f"run_config.yaml:{line}:" in said and "no playbook is named 'nans'" in said and "did you mean nan" in said, said
