"""The litgpt contract, its data: the TextFiles cache (litdata chunks litgpt reads) keyed by everything that
shapes it, built in staging, trusted only when whole; and `--accept-data-change` resuming a real litgpt run
onto changed data, its loader state reset (or relocated when only the cache's path moved)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine.trainers.litgpt import data_cache
from tests.conftest import make_project, seed_data_cache, stop_process, wait_for


TEXT_FILES = {"class_path": data_cache.TEXT_FILES, "init_args": {"train_data_path": "a", "val_data_path": "b",
                                                                  "num_workers": 2, "seed": 42}}


def test_the_cache_key_changes_with_everything_that_shapes_the_cache_and_nothing_else():
    key = data_cache.cache_key("sha256:t", "tok", 64, TEXT_FILES)
    moved = {**TEXT_FILES, "init_args": {**TEXT_FILES["init_args"], "train_data_path": "x", "num_workers": 8}}
    assert data_cache.cache_key("sha256:t", "tok", 64, moved) == key
    reseeded = {**TEXT_FILES, "init_args": {**TEXT_FILES["init_args"], "seed": 1}}
    others = [data_cache.cache_key("sha256:u", "tok", 64, TEXT_FILES), data_cache.cache_key("sha256:t", "tok2", 64, TEXT_FILES),
              data_cache.cache_key("sha256:t", "tok", 128, TEXT_FILES), data_cache.cache_key("sha256:t", "tok", 64, reseeded),
              data_cache.cache_key("sha256:t", "tok", 64, {**TEXT_FILES, "class_path": "my.TextFiles"})]
    assert len({key, *others}) == 6


def test_the_tokenizer_hash_follows_its_files(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"a": 1}')
    first = data_cache.tokenizer_hash(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert data_cache.tokenizer_hash(tmp_path) != first


def _preprocess(shared_data, cache, **popen):
    return subprocess.Popen(
        [sys.executable, "-m", "engine.trainers.litgpt.preprocess", "--cache", str(cache),
         "--train", str(shared_data / "stdlib" / "train"), "--val", str(shared_data / "stdlib" / "val"),
         "--tokenizer", str(shared_data / "tokenizer"), "--block-size", "64", "--", "echo", "exec-ok"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def test_a_scratch_run_links_the_complete_caches_only_and_keeps_what_it_has(tmp_path):
    source, scratch = tmp_path / "run", tmp_path / "scratch"
    for name, splits in (("complete", ("train", "val")), ("half", ("train",)), ("complete.staging", ("train", "val"))):
        for split in splits:
            (source / "data" / name / split / split).mkdir(parents=True)
            (source / "data" / name / split / split / "index.json").write_text("{}")
    (scratch / "data" / "own").mkdir(parents=True)
    linked = data_cache.link_complete_caches(source, scratch)
    assert linked == [scratch / "data" / "complete"] and not linked[0].is_symlink()
    index = linked[0] / "train" / "train" / "index.json"     # the same bytes, linked: no second copy
    assert index.stat().st_ino == (source / "data" / "complete" / "train" / "train" / "index.json").stat().st_ino
    assert sorted(p.name for p in (scratch / "data").iterdir()) == ["complete", "own"]
    assert data_cache.link_complete_caches(source, scratch) == []          # already there: nothing twice
    assert data_cache.link_complete_caches(tmp_path / "none", scratch) == []


def test_a_killed_preprocessing_leaves_nothing_trusted_and_the_next_launch_redoes_it(tmp_path, shared_data):
    cache = tmp_path / "run" / "data" / "k"
    staging = data_cache.staging_dir(cache)
    # Killed at the last moment a kill can hurt (a whole cache in staging, not yet renamed), wherever
    # the machine's speed puts it: the process SIGKILLs itself there (engine/core/crash_points.py).
    proc = _preprocess(shared_data, cache, env={**os.environ, "RUNBOOK_CRASH_AT": "data-cache-staged"})
    proc.wait(timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout.read()
    assert data_cache.is_complete(staging)                       # it was complete, but never renamed...
    assert not cache.exists() and not data_cache.is_complete(cache)   # ...so nothing a launch trusts

    again = _preprocess(shared_data, cache)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert data_cache.is_complete(cache) and not staging.exists()
    # then it became the trainer (exec): its output is there. Not necessarily last: Python's multiprocessing
    # resource tracker (litdata's workers) may still print a shutdown warning after it.
    assert "data cache built" in out and "exec-ok" in out.splitlines(), out

    third = _preprocess(shared_data, cache)
    out, _ = third.communicate(timeout=300)
    assert third.returncode == 0 and "data cache reused" in out, out


def _own_corpus(project, shared_data):
    """The corpus, copied: this test changes the text. Its first cache is the session's prebuilt one
    (seed_data_cache: the copy has the shared corpus's bytes, so the same key), the one its first launch would
    build: a build costs ~15 CPU s of interpreter start-ups (litdata's spawned workers), whatever the corpus's
    size. The accepted launch builds the changed text's cache for real, as test_a_killed_preprocessing_...
    and tests/litgpt/test_startup.py's launch do theirs."""
    corpus = project.root / "data" / "stdlib"
    corpus.unlink()
    shutil.copytree(shared_data / "stdlib", corpus)
    seed_data_cache(project, shared_data)
    return corpus


def test_accept_data_change_resumes_a_real_run_with_the_loader_reset(tmp_path, shared_data):
    project = make_project(tmp_path / "project", shared_data, prebuilt_data=False,   # seeded once the corpus is its own
                           max_tokens=10240, save_interval=5)   # 10 steps
    corpus = _own_corpus(project, shared_data)
    watcher = project.watch()
    try:
        wait_for(lambda: (project.step_dir(5) / "model_config.yaml").exists(), 240, what="first checkpoint")
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(timeout=60) == 7, project.watch_output()   # INTERRUPTED
    finally:
        stop_process(watcher)
    old_caches = sorted(p.name for p in (project.run_dir / "data").iterdir())
    first_log = (project.run_dir / "logs" / "trainer-001.log").read_text()   # the first launch read the seeded cache
    assert len(old_caches) == 1 and f"data found in {project.run_dir / 'data' / old_caches[0]}" in first_log, first_log[-3000:]

    with open(corpus / "train" / "shard-000.txt", "a") as fh:
        fh.write("\n\ndef added_after_the_run_started():\n    return 42\n" * 200)
    refused = project.watch()
    assert refused.wait(timeout=120) == 3, project.watch_output()
    assert "--accept-data-change" in project.watch_output()

    started = time.monotonic()
    accepted = project.watch("--accept-data-change")
    try:
        assert accepted.wait(timeout=300) == 0, project.watch_output()
    finally:
        stop_process(accepted)
    output = project.watch_output()
    assert "doesn't match" not in output and time.monotonic() - started < 300

    caches = sorted(p.name for p in (project.run_dir / "data").iterdir())
    assert len(caches) == 2 and set(old_caches) < set(caches)   # a new cache for the new text, the old one kept
    entries = [json.loads(line) for line in (project.run_dir / "journal.jsonl").read_text().splitlines()]
    rewritten = [e for e in entries if e["kind"] == "resume_rewritten"]
    assert len(rewritten) == 1 and "RESET" in rewritten[0]["note"] and "next epoch of the new data" in rewritten[0]["note"]
    last_launch = [e for e in entries if e["kind"] == "launch"][-1]
    assert "-data-" in last_launch["resume_from"] and last_launch["resume_from"].startswith(str(project.run_dir))
    assert project.final_progress()["step_count"] == 10   # every optimizer step of the configured tokens

    # The project moved (a new Spot node mounts it at another path): the same cache under another folder.
    # A resume RELOCATES the loader (position and data order kept) in a copy; the checkpoint is untouched.
    from engine.checkpoints.store import Checkpoint
    from engine.trainers.run_config import load_config
    from engine.trainers.litgpt.adapter import LitGPTAdapter
    from engine.trainers.litgpt.resume import loader_input_dir

    moved_root = tmp_path / "moved"
    project.root.rename(moved_root)
    moved = load_config(moved_root / "configs" / "run_config.yaml")
    adapter = LitGPTAdapter()
    # final/ is the accepted launch's own save (step 10 may be the first launch's: a notice save can land there).
    step10 = Checkpoint(moved.out_dir / "final", 10, adapter.layout)
    original = (adapter.layout.resume_file(step10.path)).read_bytes()
    plan = adapter.prepare_resume(step10, moved, tmp_path / "scratch")
    assert "RELOCATED" in plan.note and "data order are kept" in plan.note, plan.note
    (new_key,) = set(caches) - set(old_caches)
    relocated = Path(loader_input_dir(plan.file))
    assert relocated == data_cache.loader_input_dir(moved.run_dir / "data" / new_key)
    assert (relocated / "index.json").is_file()
    assert adapter.layout.resume_file(step10.path).read_bytes() == original
