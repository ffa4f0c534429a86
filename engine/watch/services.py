"""The optional services the watch loop runs beside itself, each started here and stopped by the
loop's ExitStack: upkeep's scheduled jobs, the cloud-notice poller and the Prometheus endpoint.
Each returns None when it is not configured (or cannot start: a busy metrics port is a warning)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from engine.checkpoints.catalog import CheckpointCatalog
from engine.core.events import EventBus, Publish, WatchWarning
from engine.cluster.notice_poller import NoticePoller
from engine.core.settings import CloudNoticeSettings, MetricsSettings, UpkeepSettings
from engine.core.state import RunPhase, StateSnapshot
from engine.core.write_trouble import WriteTrouble
from engine.records.journal import Journal
from engine.watch.parts import WatchParts
from engine.watch.metrics import MetricsEndpoint, RunView
from engine.watch.upkeep import SupervisorPorts, Upkeep


def upkeep(settings: UpkeepSettings, parts: WatchParts, recovery_lock: threading.Lock, events: Publish,
           trouble: WriteTrouble) -> Upkeep:
    jobs = Upkeep(settings, SupervisorPorts(parts), recovery_lock=recovery_lock, events=events, trouble=trouble)
    jobs.start()
    return jobs


def notice_poller(settings: CloudNoticeSettings, request_stop: Callable[[str], None],
                  events: Publish) -> NoticePoller | None:
    if not settings.enabled:
        return None

    def noticed(text: str) -> None:   # the scheduler's thread: the watch loop acts on it
        request_stop(f"watcher saw a cloud interruption notice ({text})")
        events(WatchWarning(f"{text}: saving and stopping"))

    poller = NoticePoller(settings, noticed, events)
    poller.start()
    return poller


def metrics_endpoint(settings: MetricsSettings, run_dir: Path, catalog: CheckpointCatalog, journal: Journal, bus: EventBus,
                     now: tuple[RunPhase, StateSnapshot | None]) -> MetricsEndpoint | None:
    """The optional Prometheus endpoint (engine/watch/metrics.py), a subscriber of the loop's bus from `now`
    (the phase and snapshot the loop has as it starts the endpoint, on the loop's thread: nothing is missed
    in between). A busy port is a warning, not a refusal: supervision matters more than a dashboard (a
    requeued job must not die on another job's port)."""
    if settings.port is None:
        return None
    layout, out_dir = catalog.layout, catalog.out_dir
    run = RunView(*now)
    endpoint = MetricsEndpoint(settings, run_dir, run, lambda step: layout.resume_file(out_dir / layout.folder_name(step)))
    events = bus.publish
    try:
        url = endpoint.start()
    except OSError as error:
        events(WatchWarning(f"no metrics endpoint: cannot listen on {settings.host}:{settings.port} "
               f"({error.strerror or error}); watching without it"))
        journal.append("metrics_endpoint", error=str(error))
        return None
    journal.append("metrics_endpoint", url=url)
    bus.subscribe(run)
    return endpoint
