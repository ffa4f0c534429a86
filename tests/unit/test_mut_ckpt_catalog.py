"""engine/checkpoints/catalog.py on real script checkpoints (torch.save files), a real journal and real logs:
what a refresh reads, skips and remembers, what a rollback moves, what a prune may delete, and how it says so."""

from __future__ import annotations

import os

from engine.checkpoints.catalog import PruneResult
from engine.checkpoints.store import MANIFEST_NAME
from engine.records.journal import Journal
from engine.trainers.script.adapter import ScriptAdapter
from tests.unit.ckpt_files import announce, catalog_of, save, saved


def _corrupt(folder) -> None:
    (folder / "state.pt").write_bytes(b"PK\x03\x04 not a whole torch file")


def test_the_prune_summary_says_what_moved_went_and_stayed_naming_ten_at_most():
    result = PruneResult(moved=["step-000050"], removed=["tmp-a", "tmp-b"], deleted=["step-000010", "step-000020"],
                         foreign=[f"n{i}" for i in range(11)], freed_bytes=2_540_000, kept_steps=[30, 40])
    assert result.summary() == (
        "moved 1 partial save(s) to quarantine (step-000050); deleted 2 temporary file(s) of runbook's (tmp-a, tmp-b); "
        "deleted 2 checkpoint(s) (step-000010, step-000020), freed 2.5 MB; kept steps [30, 40]; "
        "left alone 11 item(s) that runbook did not write: n0, n1, n2, n3, n4, n5, n6, n7, n8, n9 and 1 more")
    assert PruneResult().summary() == "deleted 0 checkpoint(s), freed 0.0 MB; kept steps []"
    assert "freed 1.2 MB" in PruneResult(freed_bytes=1_150_001).summary()   # MB: 10^6 bytes
    ten = PruneResult(foreign=[f"n{i}" for i in range(10)])
    assert ten.foreign_warning == "left alone 10 item(s) that runbook did not write: n0, n1, n2, n3, n4, n5, n6, n7, n8, n9"


def test_a_refresh_seals_links_the_newest_and_journals_what_it_read(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    catalog = catalog_of(tmp_path, journal=journal)
    announce(tmp_path / "run", save(catalog.out_dir, 10), save(catalog.out_dir, 20))
    assert catalog.refresh() == [] and catalog.verified == {10, 20}
    assert (catalog.out_dir / "step-000010" / MANIFEST_NAME).is_file() and os.readlink(catalog.out_dir / "last") == "step-000020"
    entry = journal.entries()[-1]
    assert (entry["kind"], entry["sealed"], entry["rechecked"], entry["bad"], entry["forced"]) == ("verified", [10, 20], [], [], False)
    assert catalog.refresh() == [] and len(journal.entries()) == 1      # nothing new: nothing read, nothing journaled
    assert catalog.refresh(force=True) == []
    entry = journal.entries()[-1]
    assert (entry["sealed"], entry["rechecked"], entry["forced"]) == ([], [10, 20], True)
    status = catalog.status()
    assert (status.count, status.newest_step, status.newest_verified_step, status.corrupt_steps) == (2, 20, 20, [])
    assert status.last_size_bytes == sum(f.stat().st_size for f in (catalog.out_dir / "step-000020").iterdir())


def test_a_refresh_leaves_saves_at_or_after_the_one_in_progress_to_a_later_refresh(tmp_path):
    catalog = saved(tmp_path, 10, 20, 30, seal=False)
    assert catalog.refresh(saving_from_step=20) == [] and catalog.verified == {10}
    assert not (catalog.out_dir / "step-000020" / MANIFEST_NAME).exists()
    assert catalog.refresh() == [] and catalog.verified == {10, 20, 30}


def test_a_corrupt_checkpoint_stays_corrupt_until_a_forced_refresh_reads_it_again(tmp_path):
    catalog = saved(tmp_path, 10, 20, seal=False)
    _corrupt(catalog.out_dir / "step-000020")
    assert catalog.refresh() == ["step-000020"] and catalog.verified == {10}
    assert catalog.corrupt == {20: catalog_reason(catalog.out_dir / "step-000020")}
    assert catalog.status().corrupt_steps == [20] and catalog.status().newest_verified_step == 10
    save(catalog.out_dir, 20, name="fixed")
    os.replace(catalog.out_dir / "fixed" / "state.pt", catalog.out_dir / "step-000020" / "state.pt")
    assert catalog.refresh() == ["step-000020"] and catalog.verified == {10}      # remembered, not read again
    assert catalog.refresh(force=True) == [] and catalog.verified == {10, 20} and catalog.corrupt == {}


def test_a_folder_that_went_away_is_forgotten_and_its_next_save_read_anew(tmp_path):
    catalog = saved(tmp_path, 10, 20)
    for f in (catalog.out_dir / "step-000020").iterdir():
        f.unlink()
    (catalog.out_dir / "step-000020").rmdir()
    assert catalog.refresh() == [] and catalog.verified == {10}
    _corrupt(save(catalog.out_dir, 20))
    assert catalog.refresh() == ["step-000020"] and catalog.verified == {10}


def test_sealed_only_rechecks_sealed_checkpoints_and_leaves_unsealed_ones(tmp_path):
    saved(tmp_path, 10)
    catalog = catalog_of(tmp_path)
    save(catalog.out_dir, 20)                                               # no manifest: maybe being written
    assert catalog.refresh(sealed_only=True) == [] and catalog.verified == {10}
    assert not (catalog.out_dir / "step-000020" / MANIFEST_NAME).exists()


def test_a_read_only_catalog_verifies_without_sealing_moving_or_linking(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    catalog = catalog_of(tmp_path, journal=journal, read_only=True)
    save(catalog.out_dir, 10)
    _corrupt(save(catalog.out_dir, 20))
    assert catalog.refresh(quarantine_corrupt=True) == ["step-000020"] and catalog.verified == {10}
    assert sorted(os.listdir(catalog.out_dir)) == ["step-000010", "step-000020"]
    assert os.listdir(catalog.out_dir / "step-000010") == ["state.pt"] and journal.entries() == []


def test_quarantine_corrupt_moves_the_bad_one_out_and_relinks_last(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    catalog = catalog_of(tmp_path, journal=journal)
    announce(tmp_path / "run", save(catalog.out_dir, 10))
    _corrupt(save(catalog.out_dir, 20))
    assert catalog.refresh(quarantine_corrupt=True) == ["step-000020"]
    assert sorted(os.listdir(catalog.out_dir)) == ["last", "step-000010"] and os.readlink(catalog.out_dir / "last") == "step-000010"
    [moved] = os.listdir(catalog.quarantine_dir)
    assert moved.startswith("step-000020-") and 20 not in catalog.corrupt
    assert [e["kind"] for e in journal.entries()] == ["verified", "quarantined"]
    assert journal.entries()[-1]["reason"].startswith("failed verification: ")


def catalog_reason(folder) -> str:
    from engine.checkpoints import store
    from engine.checkpoints.manifest import verify_checkpoint
    return verify_checkpoint(store.Checkpoint(folder, 20, ScriptAdapter().layout)).reason


def test_last_is_moved_only_when_a_checkpoint_is_newly_verified(tmp_path):
    catalog = saved(tmp_path, 10, 20)
    os.remove(catalog.out_dir / "last")
    os.symlink("step-000010", catalog.out_dir / "last")                      # as a user (or an older watcher) left it
    assert catalog.refresh() == [] and os.readlink(catalog.out_dir / "last") == "step-000010"
    fresh = catalog_of(tmp_path)                                            # a watcher restarting: nothing verified yet
    assert fresh.refresh(saving_from_step=0) == [] and fresh.verified == set()
    assert os.readlink(catalog.out_dir / "last") == "step-000010"            # not removed for want of a verified one
    announce(tmp_path / "run", save(catalog.out_dir, 30))
    assert catalog.refresh() == [] and os.readlink(catalog.out_dir / "last") == "step-000030"


def test_last_goes_when_no_verified_checkpoint_is_left(tmp_path):
    catalog = saved(tmp_path, 10)
    moved = catalog.quarantine(catalog.checkpoints()[0], "test")
    assert moved.parent == catalog.quarantine_dir and (moved / "state.pt").is_file()
    assert not os.path.lexists(catalog.out_dir / "last") and catalog.newest_verified() is None
    catalog.relink_last()                                                   # nothing to link, nothing to remove
    assert not os.path.lexists(catalog.out_dir / "last")


def test_a_resume_file_is_judged_by_its_checkpoint_and_a_copy_by_being_there(tmp_path):
    catalog = saved(tmp_path, 10, 20)
    assert catalog.resume_file_corrupt(catalog.out_dir / "step-000010" / "state.pt") == (False, None)
    assert catalog.resume_file_corrupt(tmp_path / "nowhere" / "state.pt") is None          # no step in the path
    assert catalog.resume_file_corrupt(catalog.out_dir / "step-000030" / "state.pt") is None   # no such checkpoint
    copy = tmp_path / "rescaled" / "step-000020" / "state.pt"
    copy.parent.mkdir(parents=True)
    assert catalog.resume_file_corrupt(copy) == (True, f"the resume copy {copy} is missing or empty")
    copy.write_bytes(b"")
    assert catalog.resume_file_corrupt(copy) == (True, f"the resume copy {copy} is missing or empty")
    copy.write_bytes(b"a rescaled copy")
    assert catalog.resume_file_corrupt(copy) == (False, None)
    _corrupt(catalog.out_dir / "step-000020")
    corrupt, why = catalog.resume_file_corrupt(copy)
    assert corrupt is True and why.startswith("step-000020: ")


def test_a_rollback_moves_the_bad_step_and_those_within_steps_before_it(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    catalog = catalog_of(tmp_path, journal=journal)
    announce(tmp_path / "run", *(save(catalog.out_dir, s) for s in (4, 8, 12, 16, 20)))
    catalog.refresh()
    result = catalog.rollback(bad_step=16, steps=0, scan_nonfinite=False, why="loss spike")
    assert result.quarantined == {16: "saved at step 16, within 0 steps of or after the first bad step 16",
                                  20: "saved at step 20, within 0 steps of or after the first bad step 16"}
    assert result.target.step == 12 and os.readlink(catalog.out_dir / "last") == "step-000012"
    result = catalog.rollback(bad_step=12, steps=4, scan_nonfinite=False, why="loss spike")
    assert sorted(result.quarantined) == [12] and result.target.step == 8      # 8 is not within 4 steps of 12
    assert all(e["reason"].startswith("loss spike: saved at step") for e in journal.entries() if e["kind"] == "quarantined")


def test_a_rollback_scan_moves_nan_weights_and_keeps_what_it_cannot_read(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    catalog = catalog_of(tmp_path, journal=journal)
    announce(tmp_path / "run", save(catalog.out_dir, 4, nan=True), save(catalog.out_dir, 8), save(catalog.out_dir, 12))
    catalog.refresh()
    (catalog.out_dir / "step-000008" / "state.pt").write_bytes(b"not a torch file")
    unscanned = catalog.rollback(bad_step=100, steps=10, scan_nonfinite=False, why="nan")
    assert unscanned.quarantined == {} and unscanned.unreadable == {} and unscanned.target.step == 12
    result = catalog.rollback(bad_step=100, steps=10, scan_nonfinite=True, why="nan")
    assert result.quarantined == {4: "non-finite weights in w"} and list(result.unreadable) == [8]
    assert result.target.step == 12 and (catalog.out_dir / "step-000008").is_dir()
    assert [e["step"] for e in journal.entries() if e["kind"] == "weights_unscanned"] == [8]


def test_a_prune_moves_partial_saves_only_once_the_trainer_is_gone(tmp_path):
    catalog = saved(tmp_path, 10, 20, 30)
    partial = catalog.out_dir / "step-000040"
    partial.mkdir()
    (partial / "state.pt").write_bytes(b"PK\x03\x04 half")
    announce(tmp_path / "run", partial)
    alive = catalog.prune(keep_last_k=5, best_step=None, remove_partial=True, trainer_alive=True)
    assert alive.moved == [] and partial.is_dir() and alive.deleted == []
    gone = catalog.prune(keep_last_k=5, best_step=None, remove_partial=True, trainer_alive=False)
    assert gone.moved == ["step-000040"] and not partial.exists() and gone.freed_bytes == len(b"PK\x03\x04 half")
    assert gone.kept_steps == [10, 20, 30]


def test_a_prune_keeps_the_newest_verified_the_best_the_unverified_and_what_last_names(tmp_path):
    catalog = saved(tmp_path, 10, 20, 30, 40, 50)
    save_60 = save(catalog.out_dir, 60)                                    # not verified yet: maybe being written
    announce(tmp_path / "run", save_60)
    os.remove(catalog.out_dir / "last")
    os.symlink("step-000020", catalog.out_dir / "last")                     # `last` behind (a full disk)
    result = catalog.prune(keep_last_k=0, best_step=30, remove_partial=False, trainer_alive=True)
    assert result.deleted == ["step-000010", "step-000040"] and result.kept_steps == [20, 30, 50, 60]
    assert catalog.verified == {20, 30, 50}


def test_an_empty_out_dir_has_no_checkpoint_and_no_size(tmp_path):
    status = catalog_of(tmp_path).status()
    assert (status.count, status.newest_step, status.newest_verified_step, status.last_size_bytes,
            status.corrupt_steps) == (0, None, None, 0, [])


def test_another_runs_out_dir_inside_is_told_once_and_journaled(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    catalog = catalog_of(tmp_path, journal=journal)
    told: list[str] = []
    catalog.warn = told.append
    nested = save(catalog.out_dir, 10)
    (nested / "runbook-owner.json").write_text("{}")
    assert catalog.refresh() == [] and catalog.refresh() == [] and catalog.verified == set()
    assert told == [f"{nested} is another run's out_dir (it holds runbook-owner.json): never taken for a checkpoint, "
                    "verified, quarantined or pruned; give the runs separate out_dirs"]
    assert [e["path"] for e in journal.entries() if e["kind"] == "other_run_inside"] == [str(nested)]


def test_a_rollback_names_at_most_three_non_finite_tensors(tmp_path):
    import torch

    catalog = saved(tmp_path, 4, 8)
    nan = torch.tensor([float("nan")])
    torch.save({"model": {f"t{i}": nan for i in range(5)}}, catalog.out_dir / "step-000004" / "state.pt")
    result = catalog.rollback(bad_step=100, steps=0, scan_nonfinite=True, why="nan")
    assert result.quarantined == {4: "non-finite weights in t0, t1, t2"}


def test_weights_a_trainers_reader_fails_on_are_kept_and_its_error_said_in_160_characters(tmp_path):
    import torch

    from engine.checkpoints.catalog import CheckpointCatalog
    from engine.core.run_folder import RunFolder
    from engine.trainers.litgpt.adapter import LitGPTAdapter

    folder = tmp_path / "out" / "step-00000008"
    folder.mkdir(parents=True)
    torch.save({"model": {"w": tmp_path}}, folder / "lit_model.pth")    # a Path: refused by weights_only loading
    (tmp_path / "run").mkdir()
    catalog = CheckpointCatalog(tmp_path / "out", RunFolder(tmp_path / "run"), tmp_path / "q", LitGPTAdapter())
    result = catalog.rollback(bad_step=100, steps=0, scan_nonfinite=True, why="nan")
    assert result.quarantined == {} and folder.is_dir()
    head = "cannot read its weights (UnpicklingError: "
    assert result.unreadable[8].startswith(head) and len(result.unreadable[8]) == len(head) + 160 + 1


def test_the_catalog_knows_when_the_trainer_saved_its_final_checkpoint(tmp_path):
    catalog = saved(tmp_path, 10)
    assert catalog.final_exists() is False
    save(catalog.out_dir, 20, name="final")
    assert catalog.final_exists() is True


def test_a_suspect_checkpoint_is_marked_journaled_and_moved_so_the_resume_point_is_older(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    catalog = catalog_of(tmp_path, journal=journal)
    announce(tmp_path / "run", save(catalog.out_dir, 10), save(catalog.out_dir, 20))
    catalog.refresh()
    assert catalog.mark_suspect(30, "no such step") is None and catalog.newest_verified().step == 20
    moved = catalog.mark_suspect(20, "the divergence began at step 21")
    assert moved is not None and moved.parent == catalog.quarantine_dir and not (catalog.out_dir / "step-000020").exists()
    assert catalog.newest_verified().step == 10 and os.readlink(catalog.out_dir / "last") == "step-000010"
    assert "suspect" in (moved / MANIFEST_NAME).read_text() and \
        (moved / "QUARANTINE_REASON.txt").read_text().startswith("suspect: the divergence began at step 21")
    assert [(e["kind"], e.get("step")) for e in journal.entries() if e["kind"] in ("checkpoint_suspect", "quarantined")] == \
        [("checkpoint_suspect", 20), ("quarantined", 20)]
