"""engine/checkpoints/store.py on real script checkpoints (torch.save files) in tmp_path: the temp prefix, what
is foreign, manifest entries refused before they are read, the `last` link, quarantine and prune's refusals."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from engine.checkpoints import store
from engine.checkpoints.last_link import last_in_the_way, last_link_target, update_last_link
from engine.checkpoints.manifest import _entry_problem, seal_checkpoint, verify_checkpoint, write_manifest
from engine.checkpoints.pruning import apply_prune, plan_prune
from engine.checkpoints.store import MANIFEST_NAME, Checkpoint
from engine.trainers.script.adapter import ScriptAdapter
from tests.unit.ckpt_files import save

LAYOUT = ScriptAdapter().layout


def _ckpt(folder) -> Checkpoint:
    return Checkpoint(path=folder, step=LAYOUT.step_of(folder.name), layout=LAYOUT)


def test_the_temp_prefix_is_fixed_by_the_out_dirs_real_path(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "out")
    prefix = store.own_tmp_prefix(tmp_path / "out")
    assert re.fullmatch(r"tmp-runbook-[0-9a-f]{10}-", prefix)
    assert store.own_tmp_prefix(tmp_path / "link") == prefix != store.own_tmp_prefix(tmp_path / "other")


def test_foreign_files_are_what_neither_the_trainer_nor_runbook_writes(tmp_path):
    folder = save(tmp_path / "out", 10)
    prefix = store.own_tmp_prefix(tmp_path / "out")
    (folder / MANIFEST_NAME).write_text("{}")
    (folder / f"{prefix}x.part").write_text("ours")
    (folder / "notes.txt").write_text("a user's")
    (folder / "a-dir").mkdir()
    (folder / "state.pt").rename(folder / "real.pt")
    (folder / "state.pt").symlink_to(folder / "real.pt")               # the trainer's name, but a link
    assert store.foreign_files(folder, LAYOUT) == ["a-dir", "notes.txt", "real.pt", "state.pt"]
    assert store.foreign_files(tmp_path / "missing", LAYOUT) == []


def test_a_checkpoints_size_counts_its_files_and_a_link_as_itself(tmp_path):
    folder = save(tmp_path / "out", 10)
    (folder / "sub").mkdir()
    (folder / "sub" / "a").write_bytes(b"x" * 100)
    big = tmp_path / "big"
    big.write_bytes(b"y" * 10_000)
    (folder / "link").symlink_to(big)
    expected = (folder / "state.pt").stat().st_size + 100 + os.lstat(folder / "link").st_size
    assert _ckpt(folder).size_bytes() == expected and _ckpt(folder).resume_file == folder / "state.pt"


def test_another_runs_out_dir_inside_is_never_a_checkpoint(tmp_path):
    out = tmp_path / "out"
    save(out, 20)
    nested = save(out, 10)
    (nested / store.OWNER_MARKER_NAME).write_text("{}")
    (out / "other").mkdir()
    (out / "other" / store.OWNER_MARKER_NAME).write_text("{}")
    (out / "step-000030").write_text("a file named like a checkpoint")
    (out / "step-000040").symlink_to(out / "step-000020")
    (out / "linked").symlink_to(out / "other")                          # a link to another run's: not followed
    assert store.other_runs_inside(out) == ["other", "step-000010"]
    assert [c.path.name for c in store.list_checkpoints(out, LAYOUT)] == ["step-000020"]
    assert store.list_checkpoints(tmp_path / "missing", LAYOUT) == [] and store.other_runs_inside(tmp_path / "missing") == []
    with pytest.raises(ValueError, match="another run's out_dir"):
        store.quarantine(_ckpt(nested), tmp_path / "q", "test")


def _manifest(folder, files: dict) -> None:
    (folder / MANIFEST_NAME).write_text(json.dumps({"format": 1, "files": files}))


@pytest.mark.parametrize("name", ["", ".", "..", MANIFEST_NAME, "a/b", "a\\b", "a\x00b", "n" * 256, 7])
def test_a_manifest_entry_that_is_no_file_name_of_the_folder_is_refused(tmp_path, name):
    folder = save(tmp_path / "out", 10)
    _manifest(folder, {name if isinstance(name, str) else "7": {"size": 1, "sha256": "0"}})
    if not isinstance(name, str):                                       # a JSON key is a string: only via a dict
        problem = _entry_problem(_ckpt(folder), name, {})
    else:
        problem = verify_checkpoint(_ckpt(folder)).reason
    assert problem == f"{MANIFEST_NAME} is bad: entry {str(name)[:80]!r} is not a file name inside the checkpoint folder"


def test_a_manifest_entry_is_named_in_80_characters_and_a_255_character_name_is_a_name(tmp_path):
    folder = save(tmp_path / "out", 10)
    long = "n" * 300
    assert _entry_problem(_ckpt(folder), long, {}) == (
        f"{MANIFEST_NAME} is bad: entry {'n' * 80!r} is not a file name inside the checkpoint folder")
    assert _entry_problem(_ckpt(folder), "n" * 255, {}) == f"{'n' * 255} is listed in {MANIFEST_NAME} but missing"


def test_manifest_entries_that_are_links_pipes_or_too_big_are_refused_unread(tmp_path):
    folder = save(tmp_path / "out", 10)
    (folder / "link").symlink_to(folder / "state.pt")
    os.mkfifo(folder / "pipe")
    with open(folder / "sparse", "wb") as f:
        f.truncate(256 * 2**20 + 1)                                       # one byte over the side-file cap
    ckpt = _ckpt(folder)
    assert _entry_problem(ckpt, "link", {}).endswith("is a symlink (a checkpoint's files are its own)")
    assert _entry_problem(ckpt, "pipe", {}).endswith("'pipe' is not a regular file")
    assert _entry_problem(ckpt, "sparse", {}) == (
        f"{MANIFEST_NAME} is bad: entry 'sparse' is 268,435,457 bytes, more than the 268,435,456 a side file may have (not hashed)")
    assert _entry_problem(ckpt, "state.pt", {}) is None
    with open(folder / "sparse", "wb") as f:
        f.truncate(256 * 2**20)                                           # exactly the cap: a side file may be that big
    assert _entry_problem(ckpt, "sparse", {}) is None


def test_a_manifest_entry_the_filesystem_cannot_take_is_a_bad_manifest_not_a_crash(tmp_path):
    folder = save(tmp_path / "out", 10)
    ckpt = _ckpt(folder)
    long = "\u00e9" * 200                                                 # 200 characters, 400 bytes: over NAME_MAX
    assert _entry_problem(ckpt, long, {}) == f"{MANIFEST_NAME} is bad: entry {long!r} cannot be examined (File name too long)"
    (folder / MANIFEST_NAME).write_text('{"format": 1, "files": {"\\ud800": {"size": 1, "sha256": "0"}}}')
    result = verify_checkpoint(ckpt)                                # a lone surrogate: no file can have that name
    assert result == store.Verification(False, f"{MANIFEST_NAME} is bad: entry '\\ud800' is not a name a file can have")


def test_the_manifest_records_each_file_and_a_changed_size_or_hash_is_caught(tmp_path):
    folder = save(tmp_path / "out", 10)
    (folder / "extra.json").write_text('{"a": 1}')
    (folder / "link.json").symlink_to(folder / "extra.json")             # not a file of the folder's own
    (folder / f"{store.own_tmp_prefix(folder.parent)}x.part").write_text("ours, half written")
    assert write_manifest(_ckpt(folder)) == folder / MANIFEST_NAME
    assert sorted(json.loads((folder / MANIFEST_NAME).read_text())["files"]) == ["extra.json", "state.pt"]
    (folder / "link.json").unlink()
    assert seal_checkpoint(_ckpt(folder)).ok
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    assert (manifest["format"], manifest["step"], sorted(manifest["files"])) == (1, 10, ["extra.json", "state.pt"])
    assert manifest["files"]["extra.json"]["size"] == 8
    (folder / "extra.json").write_text('{"a": 2}')
    assert verify_checkpoint(_ckpt(folder)).reason == f"extra.json sha256 differs from {MANIFEST_NAME} (modified after sealing)"
    (folder / "extra.json").write_text('{"a": 22}')
    assert verify_checkpoint(_ckpt(folder)).reason == f"extra.json size 9 != 8 in {MANIFEST_NAME}"


@pytest.mark.parametrize("text, why", [
    ("{not json", "runbook-manifest.json is unreadable: "),
    ('{"files": [1]}', "runbook-manifest.json is unreadable: ValueError: 'files' is not an object of objects"),
    ('{"files": {"state.pt": 1}}', "runbook-manifest.json is unreadable: ValueError: 'files' is not an object of objects"),
    ('{"format": 1}', "runbook-manifest.json is unreadable: KeyError: 'files'"),
])
def test_an_unreadable_manifest_fails_verification_in_one_line(tmp_path, text, why):
    folder = save(tmp_path / "out", 10)
    (folder / MANIFEST_NAME).write_text(text)
    result = verify_checkpoint(_ckpt(folder))
    assert not result.ok and result.reason.startswith(why) and "\n" not in result.reason


def test_a_missing_empty_or_incomplete_checkpoint_fails_verification(tmp_path):
    folder = save(tmp_path / "out", 10)
    assert verify_checkpoint(_ckpt(folder), require_side_files=("config.json",)).reason == "missing side file(s): config.json"
    (folder / "state.pt").write_bytes(b"")
    assert verify_checkpoint(_ckpt(folder)) == store.Verification(False, "state.pt is empty (0 bytes)")
    (folder / "state.pt").unlink()
    assert verify_checkpoint(_ckpt(folder)) == store.Verification(False, "state.pt is missing")
    assert not seal_checkpoint(_ckpt(folder)).ok and not (folder / MANIFEST_NAME).exists()


def test_what_stands_in_the_way_of_last_is_named_and_never_replaced(tmp_path):
    out = tmp_path / "out"
    ckpt = _ckpt(save(out, 10))
    assert last_in_the_way(out) is None and last_link_target(out) is None
    (out / "last").mkdir()
    assert last_in_the_way(out).startswith(f"{out / 'last'} is a folder, not runbook's `last` link")
    assert update_last_link(out, ckpt) is False and (out / "last").is_dir()
    (out / "last").rmdir()
    (out / "last").write_text("a user's file")
    assert last_in_the_way(out).startswith(f"{out / 'last'} is a file, not")
    assert update_last_link(out, ckpt) is False and (out / "last").read_text() == "a user's file"
    assert last_link_target(out) is None
    (out / "last").unlink()
    assert update_last_link(out, ckpt) is True and os.readlink(out / "last") == "step-000010"
    assert last_link_target(out) == out / "step-000010" and last_in_the_way(out) is None
    with pytest.raises(FileNotFoundError):
        update_last_link(out, _ckpt(out / "step-000020"))
    assert sorted(os.listdir(out)) == ["last", "step-000010"]          # no temp link left


def test_a_quarantine_whose_folder_name_is_taken_gets_the_next_free_one(tmp_path):
    out, q = tmp_path / "out", tmp_path / "q"
    now = time.time()
    for t in range(-2, 30):                                             # whatever second it runs in: taken
        (q / f"step-000010-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now + t))}").mkdir(parents=True, exist_ok=True)
    first = store.quarantine(_ckpt(save(out, 10)), q, " why \n")
    second = store.quarantine(_ckpt(save(out, 10)), q, "again")
    assert first.name.endswith("Z-1") and second.name == first.name[:-1] + "2"
    reason = (first / store.QUARANTINE_REASON_NAME).read_text()
    assert reason.startswith(f"why\noriginal_path: {out / 'step-000010'}\nstep: 10\nquarantined_utc: ")


def test_plan_prune_keeps_the_newest_k_the_best_and_the_protected():
    ckpts = [Checkpoint(path=Path(f"/o/step-{s:06d}"), step=s, layout=LAYOUT) for s in (40, 10, 30, 20)]
    assert [c.step for c in plan_prune(ckpts, 0, None, set())] == [10, 20, 30, 40]
    assert [c.step for c in plan_prune(ckpts, 1, 10, {20})] == [30]
    assert plan_prune(ckpts, 9, None, set()) == []
    with pytest.raises(ValueError, match="keep_last_k must be >= 0"):
        plan_prune(ckpts, -1, None, set())


def test_apply_prune_refuses_anything_but_this_runs_own_older_checkpoints(tmp_path):
    out = tmp_path / "out"
    a, b, c = (_ckpt(save(out, s)) for s in (10, 20, 30))
    announced = {"step-000010", "step-000020", "step-000030", "other"}
    (tmp_path / "elsewhere").mkdir()
    outside = Checkpoint(path=tmp_path / "elsewhere" / "step-000010", step=10, layout=LAYOUT)
    refusals = {
        "not a checkpoint folder directly inside": [outside, Checkpoint(path=out / "other", step=1, layout=LAYOUT)],
        "never announced saving it": [a],
    }
    for why, doomed in refusals.items():
        for d in doomed:
            with pytest.raises(ValueError, match=why):
                apply_prune(out, [d], announced - ({"step-000010"} if why.startswith("never") else set()), LAYOUT)
    seal_checkpoint(b)
    with pytest.raises(ValueError, match="the newest checkpoint with a manifest"):
        apply_prune(out, [b], announced, LAYOUT)
    update_last_link(out, a)
    with pytest.raises(ValueError, match="last points at it"):
        apply_prune(out, [a], announced, LAYOUT)
    seal_checkpoint(c)
    (out / "last").unlink()
    size = b.size_bytes() + a.size_bytes()
    assert apply_prune(out, [b, a], announced, LAYOUT) == size
    assert sorted(os.listdir(out)) == ["step-000030"]


def test_final_exists_once_the_final_folder_holds_the_resume_file(tmp_path):
    out = tmp_path / "out"
    assert not store.final_exists(out, LAYOUT)
    (out / "final").mkdir(parents=True)
    assert not store.final_exists(out, LAYOUT)
    (out / "final" / "state.pt").write_bytes(b"x")
    assert store.final_exists(out, LAYOUT)
