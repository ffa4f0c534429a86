"""Cloud interruption notices (engine/cluster/notice_poller.py) against a fake metadata server on 127.0.0.1 that
answers like AWS IMDSv2 (token PUT first, 401 without it, 404 until the notice) and GCP (Metadata-Flavor
header, FALSE until TRUE); and a real toy-trainer watch that stops on the notice as on its own SIGTERM."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.cluster.notice_poller import CloudNoticeSettings, NoticePoller
from runbook.exit_codes import ExitCode
from tests.conftest import REPO, RUNBOOK, stop_process, wait_for
from tests.runs.test_toy_trainer import make_toy_project


class FakeMetadata:
    def __init__(self):
        self.aws_notice: dict | None = None
        self.gcp_preempted = "FALSE"
        self.tokens: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, code: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self):
                fake.requests.append(("PUT", self.path))
                if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self.answer(400)
                token = f"token-{len(fake.tokens) + 1}"
                fake.tokens.add(token)
                self.answer(200, token)

            def do_GET(self):
                fake.requests.append(("GET", self.path))
                if self.path == "/latest/meta-data/spot/instance-action":
                    if self.headers.get("X-aws-ec2-metadata-token") not in fake.tokens:
                        return self.answer(401)
                    return self.answer(404) if fake.aws_notice is None else self.answer(200, json.dumps(fake.aws_notice))
                if self.path == "/computeMetadata/v1/instance/preempted":
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self.answer(403)
                    return self.answer(200, fake.gcp_preempted)
                self.answer(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def metadata():
    fake = FakeMetadata()
    yield fake
    fake.close()


def poller(url: str, providers: list[str], seen: list[str], events: list | None = None) -> NoticePoller:
    settings = CloudNoticeSettings(enabled=True, providers=providers, aws_base_url=url, gcp_base_url=url, timeout_s=2)
    return NoticePoller(settings, seen.append, events.append if events is not None else None)


def test_aws_notice_is_seen_once_through_an_imdsv2_token_renewed_after_a_401(metadata):
    seen: list[str] = []
    p = poller(metadata.url, ["aws"], seen)
    assert p.poll() is None and p.poll() is None and seen == []
    assert metadata.requests.count(("PUT", "/latest/api/token")) == 1   # the token is kept between polls
    metadata.tokens.clear()                                            # it expired on the server's side
    metadata.aws_notice = {"action": "terminate", "time": "2026-11-30T12:00:00Z"}
    assert p.poll() == "AWS Spot notice: terminate at 2026-11-30T12:00:00Z"
    assert metadata.requests.count(("PUT", "/latest/api/token")) == 2
    p.poll()
    assert seen == ["AWS Spot notice: terminate at 2026-11-30T12:00:00Z"]   # on_notice once


def test_gcp_preempted_flag_needs_the_metadata_header_and_turns_true(metadata):
    seen: list[str] = []
    p = poller(metadata.url, ["gcp"], seen)
    assert p.poll() is None
    metadata.gcp_preempted = "TRUE"
    assert p.poll() == "GCP preemption notice (instance/preempted is TRUE)" and len(seen) == 1


def test_an_unreachable_metadata_service_is_no_notice_and_is_said_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"   # bound, never listening: refused
    seen, events = [], []
    p = poller(closed, ["aws", "gcp"], seen, events)
    assert p.poll() is None and p.poll() is None and seen == []
    warnings = [event.text for event in events if event.kind == "warning"]
    assert len(warnings) == 2 and "aws" in warnings[0] and "gcp" in warnings[1]


def test_cloud_notices_are_off_by_default():
    assert CloudNoticeSettings().enabled is False


def test_a_watch_stops_on_a_spot_notice_the_way_it_stops_on_sigterm(tmp_path, metadata):
    project = make_toy_project(tmp_path / "project", step_seconds=0.05)
    project.set(watch={"cloud_notices": {"enabled": True, "providers": ["aws"], "aws_base_url": metadata.url,
                                         "interval_s": 0.2}})
    env = {**os.environ, "PYTHONPATH": str(REPO)}   # the watcher imports tests.toy_trainer
    log = open(project.root / "watch.log", "ab")
    watcher = subprocess.Popen([RUNBOOK, "watch", str(project.config)], stdout=log, stderr=subprocess.STDOUT,
                               cwd=project.root, env=env)
    try:
        wait_for(lambda: any("toy step" in p.read_text(errors="replace") for p in (project.run_dir / "logs").glob("trainer-*.log")),
                 60, what="the toy's first step")
        metadata.aws_notice = {"action": "stop", "time": "2026-11-30T12:02:00Z"}
        assert watcher.wait(timeout=60) == ExitCode.INTERRUPTED, project.watch_output()
    finally:
        stop_process(watcher)
    journal = [json.loads(line) for line in (project.run_dir / "journal.jsonl").read_text().splitlines()]
    stopped = [e for e in journal if e["kind"] == "transition" and e["to"] == "stopped"]
    assert stopped and "cloud interruption notice (AWS Spot notice: stop at 2026-11-30T12:02:00Z)" in stopped[-1]["reason"]
    assert ("PUT", "/latest/api/token") in metadata.requests
