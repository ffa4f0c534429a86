"""Cloud interruption notices before the signal: an APScheduler job in `runbook watch` polls the Spot
metadata endpoints and, on a notice, asks the watcher to stop the way its own SIGTERM does: forward the
notice to the trainer (which saves the step it is in), wait up to watch.grace_period_s, stop.

- AWS Spot (IMDSv2): `PUT /latest/api/token` (header X-aws-ec2-metadata-token-ttl-seconds) gives a
  token; `GET /latest/meta-data/spot/instance-action` with it is 404 until the 2-minute notice, then
  `{"action": "terminate"|"stop"|"hibernate", "time": "...Z"}`. A 401 means the token expired.
- GCP Spot/preemptible: `GET /computeMetadata/v1/instance/preempted` with `Metadata-Flavor: Google`
  answers `TRUE` about 30 s before the stop, `FALSE` before.

Off by default (`watch.cloud_notices.enabled`); the base URLs are settings so a test (or a proxy)
can stand in for 169.254.169.254 / metadata.google.internal. An unreachable endpoint is not a
notice: it is said once and polled again. `check_aws` / `check_gcp` / `poll` are plain calls for tests.
"""

from __future__ import annotations

from engine.core.events import WatchWarning, ignore, Publish
from engine.core.settings import CloudNoticeSettings  # noqa: F401 - the settings model lives in core
import json
import threading
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from datetime import datetime

    from apscheduler.schedulers.background import BackgroundScheduler


AWS_TOKEN_TTL_S = 21600
MAX_BODY = 4096   # a notice is a few dozen bytes; a larger answer is not read whole


class NoticePoller:
    def __init__(self, settings: CloudNoticeSettings, on_notice: Callable[[str], None],
                 events: Publish | None = None):
        self.settings = settings
        self.on_notice = on_notice           # called once, with one sentence naming the notice
        self.events = events or ignore
        self.noticed: str | None = None
        self._aws_token: tuple[str, float] | None = None   # (token, monotonic expiry)
        self._unreachable: set[str] = set()
        self._scheduler = None
        self._lock = threading.Lock()

    # --- the checks (plain calls) ------------------------------------------------------------------
    def check_aws(self) -> str | None:
        base = self.settings.aws_base_url.rstrip("/")
        for attempt in (1, 2):
            token = self._token(base, refresh=attempt == 2)
            status, body = self._request(f"{base}/latest/meta-data/spot/instance-action",
                                         headers={"X-aws-ec2-metadata-token": token})
            if status == 401 and attempt == 1:
                continue   # the token expired: one new one
            if status != 200:
                return None   # 404: no notice
            try:
                notice = json.loads(body)
            except ValueError:
                return f"AWS Spot instance-action {body[:80]!r}"
            if isinstance(notice, dict):
                return f"AWS Spot notice: {notice.get('action', '?')} at {notice.get('time', '?')}"
            return f"AWS Spot instance-action {body[:80]!r}"
        return None

    def check_gcp(self) -> str | None:
        base = self.settings.gcp_base_url.rstrip("/")
        status, body = self._request(f"{base}/computeMetadata/v1/instance/preempted", headers={"Metadata-Flavor": "Google"})
        if status == 200 and body.strip().upper() == "TRUE":
            return "GCP preemption notice (instance/preempted is TRUE)"
        return None

    def poll(self) -> str | None:
        """One round over the providers; on the first notice, on_notice runs (once per poller)."""
        for provider in self.settings.providers:
            check = {"aws": self.check_aws, "gcp": self.check_gcp}.get(provider)
            try:
                found = check() if check else None
            except OSError as error:   # unreachable or refused: not a notice
                if provider not in self._unreachable:
                    self._unreachable.add(provider)
                    self.events(WatchWarning(f"cloud notices: the {provider} metadata service did not answer ({error}); "
                                                "polling on"))
                continue
            if found:
                with self._lock:
                    first, self.noticed = self.noticed is None, self.noticed or found
                if first:
                    self.on_notice(found)
                return found
        return None

    # --- HTTP ------------------------------------------------------------------------------------
    def _token(self, base: str, refresh: bool) -> str:
        now = time.monotonic()
        if refresh or self._aws_token is None or self._aws_token[1] <= now:
            status, body = self._request(f"{base}/latest/api/token", method="PUT",
                                         headers={"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_S)})
            if status != 200:
                raise OSError(f"token request answered {status}")
            self._aws_token = (body.strip(), now + AWS_TOKEN_TTL_S - 60)
        return self._aws_token[0]

    def _request(self, url: str, headers: dict, method: str = "GET") -> tuple[int, str]:
        request = urllib.request.Request(url, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_s) as response:
                return response.status, response.read(MAX_BODY).decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            return error.code, ""

    # --- the job ---------------------------------------------------------------------------------
    def start(self) -> None:
        if not self.settings.enabled or self._scheduler is not None:
            return
        from apscheduler.schedulers.background import BackgroundScheduler

        scheduler = BackgroundScheduler()
        scheduler.add_job(self.poll, "interval", seconds=self.settings.interval_s, id="cloud_notices",
                          name="cloud notices", coalesce=True, max_instances=1, misfire_grace_time=None,
                          next_run_time=_now(scheduler))
        scheduler.start()
        self._scheduler = scheduler

    def shutdown(self) -> None:
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=False)


def _now(scheduler: BackgroundScheduler) -> datetime:
    import datetime as dt

    return dt.datetime.now(scheduler.timezone)
