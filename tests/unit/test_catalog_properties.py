"""Property tests of the checkpoint catalog: random histories of saves (complete, partial, truncated),
rot, validations, verification, quarantine, upkeep retention, playbook and disk-full prunes, and
resumes, run on real files through the engine's real Supervisor, the real actions through their ports and Upkeep.

The one stand-in is the trainer process: `launch` records what it would resume from and opens a
fresh trainer log, and the test writes into that log the lines litgpt prints (saves, progress,
validation), as the trainer would. Invariants, checked after every operation:

- a prune (upkeep retention, prune_checkpoints, the disk-full prune) never deletes the newest
  verified checkpoint nor the best by val loss;
- `last` always points at a verified checkpoint (the newest one);
- nothing outside out_dir and run_dir changes;
- no file runbook did not write is deleted (foreign files seeded before and dropped during the run);
- a resume never picks an unverified file.

Profiles (tests/conftest.py): quick by default, HYPOTHESIS_PROFILE=long for a long run. The counts
(histories, operations by kind, foreign files seen and deleted) are printed at the end of every run
with the profile and the seed; RUNBOOK_FUZZ_SEED=<that seed> generates the same histories again (the
example database is off for this test, so earlier runs do not change them). CATALOG_STATS=path.json
also writes them to a file.
"""

from __future__ import annotations

import pytest

import atexit
import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.checkpoints import store as ckpts
from engine.checkpoints.last_link import last_link_target
from engine.checkpoints.manifest import has_manifest, verify_checkpoint
from engine.checkpoints.partial_saves import trainer_tmp_dir
from engine.trainers.litgpt.layout import PTH_NAME, REQUIRED_SIDE_FILES, LitGPTLayout
from engine.trainers.litgpt.resume import read_progress
from engine.language.actions import REGISTRY, ActionResult
from engine.language.actions.ports import ActionPorts
from engine.records.incident import Incident
from engine.watch.supervisor import Supervisor
from engine.core.durable import gzip_replace as gzip_file
from engine.watch.upkeep import SupervisorPorts, Upkeep, UpkeepSettings
from engine.trainers.run_config import load_config
from engine.core.notifier import NullNotifier
from engine.core.yaml_source import update_yaml_values
from tests.conftest import hypothesis_profile, hypothesis_seed, record_evidence, seeded

LAYOUT = LitGPTLayout()
REPO = Path(__file__).resolve().parents[2]
INTERVAL = 10
FOREIGN_SEEDS = {  # relative to out_dir / run_dir: names an old `tmp*` match would have taken, and others
    "tmpUserNotes.txt": b"my notes\n",
    "tmp8f3k2l": b"\x00another tool's temp file",
    "tmp-runbook-someone-else/partial.bin": b"someone else's runbook",
    "tmp-runbook-0123456789-trainer/tmpq1w2e3": b"another out_dir's trainer temp",
    "notes.md": b"# notes\n",
    ".tmp/keep.txt": b"the old TMPDIR name, a user's folder now",
}
DROPPED = ["tmpA1b2C3", "tmp-runbook-x.part", "final-notes.md", "last-week.txt", "step-notes.txt"]
STATS: Counter = Counter()


def _write_stats() -> None:
    if path := os.environ.get("CATALOG_STATS"):
        Path(path).write_text(json.dumps(dict(STATS), indent=1, sort_keys=True) + "\n")


atexit.register(_write_stats)


class RecordingSupervisor(Supervisor):
    """The real Supervisor; only the trainer process is not started (see the module docstring)."""

    def launch(self, resume_file: Path | None) -> None:
        check_resume_choice(self, resume_file)
        self.control.launches += 1
        self.resumed_from.append(resume_file)
        log = self.loaded.folder.trainer_log(self.control.launches)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        self.observer.follow(log, self.control.progress_meaning)
        self.log_path = log


def check_resume_choice(sup: Supervisor, resume_file: Path | None) -> None:
    """A resume never picks an unverified file: the newest verified, intact, sealed checkpoint, or none."""
    existing = ckpts.list_checkpoints(sup.loaded.out_dir, LAYOUT)
    newest = ckpts.newest_verified(existing, sup.catalog.verified)
    if resume_file is None:
        assert newest is None, f"resumed from scratch although {newest} is verified"
        return
    ckpt = next(c for c in existing if c.resume_file == resume_file)
    assert ckpt.step in sup.catalog.verified and has_manifest(ckpt), f"{resume_file} is not verified"
    assert verify_checkpoint(ckpt).ok, f"{resume_file} does not verify"
    assert ckpt == newest


class World:
    """A project folder with a run config, seeded foreign files, and a sentinel folder outside."""

    def __init__(self, keep_last_k: int):
        self.root = Path(tempfile.mkdtemp(prefix="catalog-"))
        project = self.root / "project"
        (project / "configs").mkdir(parents=True)
        config = project / "configs" / "run_config.yaml"
        shutil.copy(REPO / "configs" / "run_config.yaml", config)
        update_yaml_values(config, {"keep_last_k": keep_last_k})
        loaded = load_config(config)
        self.out_dir, self.run_dir = loaded.out_dir, loaded.run_dir
        self.quarantine = loaded.quarantine_dir
        self.foreign: dict[Path, bytes] = {}
        for base in (self.out_dir, self.run_dir):
            for rel, data in FOREIGN_SEEDS.items():
                self.put_foreign(base / rel, data)
        (self.root / "outside").mkdir()
        (self.root / "outside" / "tmpImportant.txt").write_bytes(b"outside")
        self.sup = RecordingSupervisor(loaded, [], NullNotifier(), "sha256:test")
        self.sup.resumed_from = []
        self.sup.launch(None)
        self.step = 0              # the trainer's optimizer step
        self.damaged = False       # rot injected since the last forced verification
        self.outside = self.snapshot_outside()

    def put_foreign(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.foreign[path] = data
        STATS["foreign_seen"] += 1

    def snapshot_outside(self) -> dict:
        inside = (self.out_dir, self.run_dir)
        return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else "dir")
                for p in self.root.rglob("*") if not any(p == d or d in p.parents for d in inside)}

    # --- what the trainer does --------------------------------------------------------------------
    def log(self, text: str) -> None:
        with open(self.sup.log_path, "a") as fh:
            fh.write(text)

    def save(self, kind: str) -> None:
        """A save by the trainer at its next step: announced first, as litgpt prints before writing."""
        self.step += INTERVAL
        folder = self.out_dir / f"step-{self.step:08d}"
        if folder.exists():
            return
        folder.mkdir(parents=True)
        self.log(f"Epoch 1 | iter {4 * self.step} step {self.step} | loss train: 5.000, val: n/a | "
                 f"iter time: 10.00 ms (step) remaining time: 0:00:01\n")
        self.log(f"Saving checkpoint to {str(folder / PTH_NAME)!r}\n")
        state = {"model": {"w": torch.full((8,), float(self.step))}, "iter_num": 4 * self.step, "step_count": self.step}
        if kind == "killed_mid_write":  # Lightning's temp file in TMPDIR, never renamed onto lit_model.pth
            trainer_tmp_dir(self.out_dir).mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=trainer_tmp_dir(self.out_dir))
            os.write(fd, b"PK\x03\x04 half a checkpoint")
            os.close(fd)
            return
        if kind == "killed_after_mkdir":
            return
        torch.save(state, folder / PTH_NAME)
        if kind == "truncated":  # a full disk under a plain write
            data = (folder / PTH_NAME).read_bytes()
            (folder / PTH_NAME).write_bytes(data[: len(data) // 2])
        if kind != "no_side_files":
            for name in REQUIRED_SIDE_FILES:
                (folder / name).write_text(f"step: {self.step}\n")

    def validate(self, loss: float) -> None:
        self.log(f"iter {4 * self.step}: val loss {loss:.4f}, val time: 5.00 ms\n")

    def rot(self, index: int, how: str) -> None:
        existing = [c for c in ckpts.list_checkpoints(self.out_dir, LAYOUT) if c.resume_file.is_file()]
        if not existing:
            return
        pth = existing[index % len(existing)].resume_file
        data = bytearray(pth.read_bytes())
        if how == "flip":
            data[len(data) // 2] ^= 0xFF
        else:
            data = data[: len(data) // 3]
        pth.write_bytes(bytes(data))
        self.damaged = True

    def drop_foreign(self, index: int) -> None:
        name = DROPPED[index % len(DROPPED)]
        path = self.out_dir / name
        if path not in self.foreign:
            self.put_foreign(path, f"dropped {name}\n".encode())

    # --- what runbook does ------------------------------------------------------------------------
    def ports(self) -> ActionPorts:
        return self.sup.incidents.ports(Incident(id="incident-1", playbook="property-test"))

    @staticmethod
    def act(ports: ActionPorts, verb: str, **params) -> ActionResult:
        """One action of a playbook, the real one, through the ports an incident lends it."""
        action = REGISTRY[verb]
        return action.apply(action.params.model_validate(params), ports)

    def prune_guarded(self, prune, keep_best: bool = True) -> None:
        """Run a prune and check that the newest verified and (unless the playbook said keep_best:
        false) the best checkpoint survive it."""
        sup = self.sup
        sup.observe()  # what the watcher knows when it prunes: the log read, finished saves sealed
        before = ckpts.list_checkpoints(self.out_dir, LAYOUT)
        newest = ckpts.newest_verified(before, sup.catalog.verified)
        best = sup.observer.tracker.best_val_step
        best_ckpt = next((c for c in before if c.step == best and c.step in sup.catalog.verified and keep_best), None)
        # One that rotted since it was sealed may be quarantined as a partial save; an intact one must stay.
        intact = [c for c in {newest, best_ckpt} if c is not None and verify_checkpoint(c).ok]
        prune()
        for keep in intact:
            assert keep.path.is_dir(), f"{keep.path.name} (newest verified or best) was deleted by a prune"

    def do(self, op: tuple) -> None:
        kind, *args = op
        STATS[f"op_{kind}"] += 1
        rt = self.ports()
        act = self.act
        if kind == "save":
            self.save(args[0])
        elif kind == "validate":
            self.validate(args[0])
        elif kind == "rot":
            self.rot(*args)
        elif kind == "foreign":
            self.drop_foreign(args[0])
        elif kind == "observe":
            self.sup.observe()
        elif kind == "verify_all":
            act(rt, "verify_checkpoints")
            self.damaged = False
        elif kind == "retention":
            upkeep = Upkeep(UpkeepSettings(), SupervisorPorts(self.sup.parts))
            self.prune_guarded(lambda: self.check_job(upkeep.retention()))
        elif kind == "prune":  # prune_checkpoints from a playbook (the killed one keeps 1000)
            keep_last_k, keep_best, remove_partial = args
            self.prune_guarded(lambda: act(rt, "prune_checkpoints", keep_last_k=keep_last_k, keep_best=keep_best,
                                                          remove_partial=remove_partial), keep_best)
        elif kind == "disk_full":  # disk_full.yaml: prune (remove_partial), compress logs, verify, resume
            self.prune_guarded(lambda: act(rt, "prune_checkpoints"))
            act(rt, "verify_checkpoints")
            act(rt, "resume")
            self.after_resume()
        elif kind == "resume":  # killed.yaml: verify, prune partial saves, resume
            act(rt, "verify_checkpoints")
            self.prune_guarded(lambda: act(rt, "prune_checkpoints", keep_last_k=1000))
            act(rt, "resume")
            self.after_resume()
        elif kind == "gzip_logs":
            for log in sorted((self.run_dir / "logs").glob("trainer-*.log")):
                if log != self.sup.log_path:
                    gzip_file(log)

    def check_job(self, run) -> None:
        assert run.status == "ok", run.summary

    def after_resume(self) -> None:
        self.damaged = False
        chosen = self.sup.resumed_from[-1]
        self.step = read_progress(chosen)["step_count"] if chosen else 0

    # --- invariants -------------------------------------------------------------------------------
    def check(self) -> None:
        assert self.snapshot_outside() == self.outside, "something outside out_dir/run_dir changed"
        for path, data in self.foreign.items():
            if path.is_file():
                assert path.read_bytes() == data, f"{path} was modified"
            else:
                STATS["foreign_deleted"] += 1
                raise AssertionError(f"{path} was deleted, and runbook did not write it")
        link = self.out_dir / ckpts.LAST_LINK_NAME
        verified = ckpts.newest_verified(ckpts.list_checkpoints(self.out_dir, LAYOUT), self.sup.catalog.verified)
        if link.is_symlink():
            target = last_link_target(self.out_dir)
            ckpt = next((c for c in ckpts.list_checkpoints(self.out_dir, LAYOUT) if c.path == target), None)
            assert ckpt is not None, f"last points at {target}, not a checkpoint"
            assert ckpt.step in self.sup.catalog.verified and has_manifest(ckpt), f"last points at unverified {target}"
            assert ckpt == verified, f"last points at {target}, not the newest verified {verified}"
            if not self.damaged:
                assert verify_checkpoint(ckpt).ok
        else:
            assert not link.exists() and verified is None, f"no last link although {verified} is verified"

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


SAVE_KINDS = ["complete"] * 4 + ["killed_mid_write", "killed_after_mkdir", "truncated", "no_side_files"]
ARGUMENTS = {
    "save": st.tuples(st.just("save"), st.sampled_from(SAVE_KINDS)),
    "validate": st.tuples(st.just("validate"), st.floats(1.0, 9.0, allow_nan=False)),
    "rot": st.tuples(st.just("rot"), st.integers(0, 20), st.sampled_from(["flip", "truncate"])),
    "foreign": st.tuples(st.just("foreign"), st.integers(0, len(DROPPED) - 1)),
    "prune": st.tuples(st.just("prune"), st.sampled_from([None, 1, 2, 1000]), st.booleans(), st.booleans()),
}
# A run mostly trains: saves and validations are drawn most often.
KINDS = ["save"] * 6 + ["validate"] * 4 + ["rot", "foreign", "observe", "verify_all", "retention", "prune", "disk_full",
                                           "resume", "gzip_logs"]
operation = st.sampled_from(KINDS).flatmap(lambda kind: ARGUMENTS.get(kind, st.just((kind,))))


@given(keep_last_k=st.integers(1, 3), history=st.lists(operation, min_size=8, max_size=40))
@example(keep_last_k=1, history=[("save", "complete"), ("save", "killed_mid_write"), ("foreign", 0), ("resume",)])
# Found by this test: upkeep retention deleted step 20 but the supervisor still counted it verified;
# after a resume from step 10 the trainer made step-00000020/ again and it passed as verified, unread.
@example(keep_last_k=1, history=[("save", "complete"), ("validate", 1.0), ("save", "complete"), ("save", "complete"),
                                 ("observe",), ("retention",), ("rot", 1, "truncate"), ("resume",),
                                 ("save", "killed_after_mkdir"), ("observe",)])
# Found by the long profile: a playbook's `keep_best: false` does delete the best one (as documented);
# the invariant holds the best only where the prune keeps it.
@example(keep_last_k=1, history=[("save", "complete")] * 5 + [("validate", 1.0), ("save", "complete"),
                                                              ("prune", None, False, False)])
def catalog_history(keep_last_k, history):
    world = World(keep_last_k)
    try:
        world.check()
        for op in history:
            world.do(op)
            world.check()
        STATS["histories"] += 1
        STATS["operations"] += len(history)
        _write_stats()  # after each history: a long run stopped early still leaves its counts
    finally:
        world.close()


@pytest.mark.slow
def test_the_checkpoint_catalog_keeps_its_invariants():
    """Every generated history (and the @examples) keeps the invariants; the counts are printed at the end
    of the run with the profile and the seed (RUNBOOK_FUZZ_SEED=<seed> makes the same histories again)."""
    STATS.clear()
    seed = hypothesis_seed()
    try:
        seeded(catalog_history, seed)()
    finally:
        record_evidence(f"checkpoint-catalog properties ({hypothesis_profile()}, RUNBOOK_FUZZ_SEED={seed}): "
                        f"{STATS['histories']} histories, {STATS['operations']} operations, "
                        f"{STATS['foreign_seen']} foreign files seen, {STATS['foreign_deleted']} deleted; operations by kind: "
                        + ", ".join(f"{k[3:]} {v}" for k, v in sorted(STATS.items()) if k.startswith("op_")))
    assert STATS["histories"] >= settings.default.max_examples and STATS["foreign_deleted"] == 0, dict(STATS)
