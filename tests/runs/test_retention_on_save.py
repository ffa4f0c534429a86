"""Retention as each save is sealed (engine/watch/observation.py `Observation._retain_new_saves`), not only on upkeep's clock.

A run that saves faster than upkeep's retention interval used to pile up checkpoints until its disk was full
(the chaos benchmark at 120 steps: a 13 MB out_dir, a 2 MB save every 0.3 s, four disk-full incidents, then an
escalation). Here upkeep's own retention pass is an hour away, so only the per-save retention can keep the
folder at keep_last_k + best while the run trains. On the toy trainer: the engine's retention, not litgpt's
files, is what is proven."""

from __future__ import annotations

import json
import threading

import pytest

from tests.conftest import REPO, TOY_STEPS


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_checkpoints_beyond_keep_last_k_are_deleted_as_the_run_saves_them(project):
    # A save every step, 0.2 s apart: the watcher observes every 0.2 s, so a few saves may land between two
    # of its looks; without the per-save retention all 40 would pile up.
    project.set(save_interval=1, keep_last_k=2, upkeep={"retention_interval_s": 3600},
                trainer={"extra": {"step_seconds": 0.2, "notice_save": True}})
    seen: list[int] = []
    done = threading.Event()

    def count_step_folders():   # what a small disk would have to hold, sampled while the run trains
        while not done.is_set():
            if project.out_dir.exists():
                seen.append(sum(1 for p in project.out_dir.iterdir() if p.is_dir() and project.layout.step_of(p.name) is not None))
            done.wait(0.02)

    sampler = threading.Thread(target=count_step_folders, daemon=True)
    sampler.start()
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        assert watcher.wait(timeout=120) == 0, project.watch_output()
    finally:
        done.set()
        sampler.join()
        if watcher.poll() is None:
            watcher.kill()

    journal = [json.loads(line) for line in (project.run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]
    completed_at = next(i for i, e in enumerate(journal) if e.get("kind") == "transition" and e.get("to") == "completed")
    during = [e for e in journal[:completed_at] if e.get("kind") == "retention"]
    assert len(during) >= 5, [e.get("summary") for e in during]   # 40 saves: retention ran while the run trained
    # 40 saves in all. Between two observations (0.2 s) the trainer may write one or two more, and one may be
    # in progress: the folder stays near keep_last_k + best, never near the 40 it held without this.
    assert max(seen) <= 10, max(seen)
    steps = sorted(step for p in project.out_dir.iterdir() if (step := project.layout.step_of(p.name)) is not None)
    # The newest two; no validation ran, so there is no best by val loss to keep besides them.
    assert steps == [TOY_STEPS - 1, TOY_STEPS], steps
