"""engine.checkpoints.store against real files shaped like litgpt's out_dir (no mocks)."""

from __future__ import annotations

import hashlib
import os
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from engine.checkpoints.last_link import last_link_target, update_last_link
from engine.checkpoints.manifest import has_manifest, seal_checkpoint, verify_checkpoint, write_manifest
from engine.checkpoints.pruning import apply_prune, plan_prune
from engine.checkpoints.store import MANIFEST_NAME, QUARANTINE_REASON_NAME, Checkpoint, list_checkpoints, newest_verified, quarantine
from engine.checkpoints.partial_saves import find_partial_saves, read_announced
from engine.trainers.litgpt.layout import LitGPTLayout
from engine.trainers.litgpt.resume import find_nonfinite_tensors, read_progress, relocate_loader_state, rescaled_copy


LAYOUT = LitGPTLayout()


def _state(step: int) -> dict:
    torch.manual_seed(step)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 64)).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        # shaped like litdata's StreamingDataLoader.state_dict(): plain python types only
        "train_dataloader": {"dataset": {"num_samples_yielded": 4 * step, "region_of_interest": [(0, 600)],
                                         "input_dir_url": None, "shuffle": True}, "current_epoch": 1},
        "iter_num": 2 * step,
        "step_count": step,
    }


def make_ckpt(out_dir: Path, step: int, side_files=("model_config.yaml", "hyperparameters.yaml",
                                                    "tokenizer.json", "tokenizer_config.json")) -> Checkpoint:
    folder = out_dir / f"step-{step:08d}"
    folder.mkdir(parents=True)
    torch.save(_state(step), folder / "lit_model.pth")
    for name in side_files:
        (folder / name).write_text(f"{name}: {step}\n")
    return Checkpoint(path=folder, step=step, layout=LAYOUT)


def announce(log_dir: Path, *ckpts: Checkpoint) -> None:
    """Append the line litgpt prints before it writes a checkpoint, as the run's trainer log would hold it."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "trainer-000.log", "a") as log:
        for c in ckpts:
            log.write(f"Saving checkpoint to {str(Path(os.path.abspath(c.path)) / 'lit_model.pth')!r}\n")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _largest_member_data_offset(pth: Path) -> tuple[int, int]:
    """(offset, length) of the stored bytes of the biggest tensor in a torch.save zip."""
    with zipfile.ZipFile(pth) as zf:
        info = max((i for i in zf.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(pth, "rb") as f:
        f.seek(info.header_offset)
        name_len, extra_len = struct.unpack("<HH", f.read(30)[26:30])
    return info.header_offset + 30 + name_len + extra_len, info.file_size


# ----------------------------------------------------------------------------------- verify


def test_good_checkpoint_verifies_and_seals(tmp_path):
    ckpt = make_ckpt(tmp_path, 20)
    assert verify_checkpoint(ckpt) == (v := verify_checkpoint(ckpt)) and v.ok and v.reason is None
    assert not has_manifest(ckpt)
    assert seal_checkpoint(ckpt).ok
    assert has_manifest(ckpt)
    assert verify_checkpoint(ckpt).ok
    assert not [p for p in ckpt.path.iterdir() if p.name.startswith("tmp")]  # no temp left behind


def test_truncated_pth_fails_with_clear_reason(tmp_path):
    ckpt = make_ckpt(tmp_path, 20)
    data = ckpt.resume_file.read_bytes()
    ckpt.resume_file.write_bytes(data[: len(data) // 2])
    v = verify_checkpoint(ckpt)
    assert not v.ok
    assert v.reason == "lit_model.pth is not a zip archive (truncated?)"


def test_flipped_byte_in_tensor_payload_is_caught(tmp_path):
    ckpt = make_ckpt(tmp_path, 20)
    offset, length = _largest_member_data_offset(ckpt.resume_file)
    data = bytearray(ckpt.resume_file.read_bytes())
    data[offset + length // 2] ^= 0x01
    ckpt.resume_file.write_bytes(bytes(data))
    v = verify_checkpoint(ckpt)
    assert not v.ok
    assert "fails its CRC" in v.reason and "/data/" in v.reason  # member: <stem>/data/<n>
    with zipfile.ZipFile(ckpt.resume_file) as zf:  # agrees with the stdlib's own check
        assert zf.testzip() is not None


def test_missing_or_empty_pth_and_missing_side_file(tmp_path):
    a = make_ckpt(tmp_path, 10)
    a.resume_file.unlink()
    assert verify_checkpoint(a).reason == "lit_model.pth is missing"
    b = make_ckpt(tmp_path, 20)
    b.resume_file.write_bytes(b"")
    assert verify_checkpoint(b).reason == "lit_model.pth is empty (0 bytes)"
    c = make_ckpt(tmp_path, 30)
    (c.path / "hyperparameters.yaml").unlink()
    v = verify_checkpoint(c)
    assert not v.ok and v.reason == "missing side file(s): hyperparameters.yaml"
    assert verify_checkpoint(c, require_side_files=()).ok


def test_manifest_mismatch_after_modification_fails(tmp_path):
    ckpt = make_ckpt(tmp_path, 20)
    write_manifest(ckpt)
    assert verify_checkpoint(ckpt).ok
    cfg = ckpt.path / "model_config.yaml"
    cfg.write_text(cfg.read_text().replace("20", "21"))  # same size, different content
    v = verify_checkpoint(ckpt)
    assert not v.ok and v.reason == "model_config.yaml sha256 differs from runbook-manifest.json (modified after sealing)"
    (ckpt.path / "tokenizer.json").write_text("grown\n" * 10)
    assert "size" in verify_checkpoint(ckpt).reason or "sha256" in verify_checkpoint(ckpt).reason
    (ckpt.path / "tokenizer.json").unlink()
    cfg.write_text("model_config.yaml: 20\n")
    assert verify_checkpoint(ckpt).reason == "tokenizer.json is listed in runbook-manifest.json but missing"
    (ckpt.path / MANIFEST_NAME).write_text("{not json")
    assert verify_checkpoint(ckpt).reason.startswith("runbook-manifest.json is unreadable")


def test_seal_refuses_a_bad_checkpoint(tmp_path):
    ckpt = make_ckpt(tmp_path, 20)
    ckpt.resume_file.write_bytes(ckpt.resume_file.read_bytes()[:100])
    assert not seal_checkpoint(ckpt).ok
    assert not has_manifest(ckpt)


# ----------------------------------------------------------------------------------- listing


def test_list_checkpoints_only_direct_step_folders(tmp_path):
    out = tmp_path / "out"
    for step in (30, 10, 20):
        make_ckpt(out, step, side_files=())
    (out / "step-bad").mkdir()
    (out / "final").mkdir()
    (out / "quarantine" / "step-00000099").mkdir(parents=True)
    (out / "step-00000050").write_text("a file, not a folder")
    got = list_checkpoints(out, LAYOUT)
    assert [c.step for c in got] == [10, 20, 30]
    assert all(c.path.parent == out and c.resume_file == c.path / "lit_model.pth" for c in got)
    assert got[0].size_bytes() == (got[0].resume_file).stat().st_size
    assert list_checkpoints(tmp_path / "missing", LAYOUT) == []


def test_newest_verified_is_pure():
    cks = [Checkpoint(Path(f"/o/step-{s:08d}"), s, LAYOUT) for s in (10, 20, 30)]
    assert newest_verified(cks, {10, 20}).step == 20
    assert newest_verified(cks, set()) is None
    assert newest_verified(cks, {99}) is None


# ----------------------------------------------------------------------------------- prune


def test_plan_prune_keeps_best_newest_k_and_protected():
    cks = [Checkpoint(Path(f"/o/step-{s:08d}"), s, LAYOUT) for s in (10, 20, 30, 40, 50, 60)]
    doomed = plan_prune(cks, keep_last_k=2, best_step=20, protected_steps={30})
    assert [c.step for c in doomed] == [10, 40]
    assert [c.step for c in plan_prune(cks, 0, None, set())] == [10, 20, 30, 40, 50, 60]
    assert plan_prune(cks, 10, None, set()) == []
    with pytest.raises(ValueError):
        plan_prune(cks, -1, None, set())


def test_apply_prune_deletes_and_refuses_unsafe(tmp_path):
    out, logs = tmp_path / "out", tmp_path / "run" / "logs"
    cks = [make_ckpt(out, s, side_files=()) for s in (10, 20, 30)]
    unannounced = make_ckpt(out, 5, side_files=())
    announce(logs, *cks)
    announced = read_announced(logs, out, LAYOUT)
    assert announced == {"step-00000010", "step-00000020", "step-00000030"}
    write_manifest(cks[1])  # step 20 is the newest sealed one
    outsider = make_ckpt(tmp_path / "elsewhere", 5, side_files=())
    with pytest.raises(ValueError, match="directly inside"):
        apply_prune(out, [cks[0], outsider], announced, LAYOUT)
    assert cks[0].path.exists() and outsider.path.exists()  # all-or-nothing
    with pytest.raises(ValueError, match="never announced"):
        apply_prune(out, [unannounced], announced, LAYOUT)
    (cks[0].path / "notes.md").write_text("mine\n")
    with pytest.raises(ValueError, match="did not write: notes.md"):
        apply_prune(out, [cks[0]], announced, LAYOUT)
    (cks[0].path / "notes.md").unlink()
    with pytest.raises(ValueError, match="newest checkpoint with a manifest"):
        apply_prune(out, [cks[1]], announced, LAYOUT)
    update_last_link(out, cks[2])
    with pytest.raises(ValueError, match="points at it"):
        apply_prune(out, [cks[2]], announced, LAYOUT)
    size = cks[0].size_bytes()
    assert apply_prune(out, [cks[0]], announced, LAYOUT) == size > 0
    assert not cks[0].path.exists() and unannounced.path.exists()
    assert [c.step for c in list_checkpoints(out, LAYOUT)] == [5, 20, 30]
    leftovers = find_partial_saves(out, announced, LAYOUT)
    assert leftovers.temps == [] and leftovers.partial == []  # no trash folder left
    assert leftovers.foreign == ["step-00000005"]


# ----------------------------------------------------------------------------------- last / quarantine


def test_last_link_points_at_folder_and_is_replaced(tmp_path):
    out = tmp_path / "out"
    a, b = make_ckpt(out, 10), make_ckpt(out, 20)
    update_last_link(out, a)
    link = out / "last"
    assert os.readlink(link) == "step-00000010"  # relative
    assert (link / "lit_model.pth").read_bytes() == a.resume_file.read_bytes()
    ino_before = os.lstat(link).st_ino
    update_last_link(out, b)
    assert os.readlink(link) == "step-00000020"
    assert os.lstat(link).st_ino != ino_before  # a new link renamed over the old one
    assert last_link_target(out) == b.path.resolve()
    assert sorted(p.name for p in out.iterdir()) == ["last", "step-00000010", "step-00000020"]
    with pytest.raises(FileNotFoundError):
        update_last_link(out, Checkpoint(out / "step-00000099", 99, LAYOUT))
    assert os.readlink(link) == "step-00000020"


def test_quarantine_refuses_inside_and_moves_with_reason(tmp_path):
    out = tmp_path / "out"
    ckpt = make_ckpt(out, 20)
    update_last_link(out, ckpt)
    with pytest.raises(ValueError, match="inside out_dir"):
        quarantine(ckpt, out / "quarantine", "bad")
    assert ckpt.path.exists()
    dest = quarantine(ckpt, tmp_path / "quarantine", "CRC mismatch in lit_model/data/3")
    assert not ckpt.path.exists() and dest.parent == tmp_path / "quarantine"
    assert dest.name.startswith("step-00000020-")
    assert (dest / "lit_model.pth").is_file()
    assert (dest / QUARANTINE_REASON_NAME).read_text().startswith("CRC mismatch in lit_model/data/3\n")
    assert list_checkpoints(out, LAYOUT) == []
    assert not (out / "last").exists() and (out / "last").is_symlink()  # dangles: caller re-points
    make_ckpt(out, 20)
    assert quarantine(Checkpoint(out / "step-00000020", 20, LAYOUT), tmp_path / "quarantine", "again") != dest


# ----------------------------------------------------------------------------------- leftovers


def test_find_partial_saves_knows_only_what_this_run_wrote(tmp_path):
    out, logs = tmp_path / "out", tmp_path / "run" / "logs"
    good = make_ckpt(out, 10)
    truncated = make_ckpt(out, 20)
    truncated.resume_file.write_bytes(truncated.resume_file.read_bytes()[:1000])
    no_pth = make_ckpt(out, 30)
    no_pth.resume_file.unlink()
    no_yaml = make_ckpt(out, 40, side_files=())
    someone_elses = make_ckpt(out, 50)
    someone_elses.resume_file.write_bytes(b"not a zip")
    (out / "final").mkdir()
    announce(logs, good, truncated, no_pth, no_yaml, Checkpoint(out / "final", 0, LAYOUT))
    from engine.checkpoints.store import own_tmp_prefix
    from engine.checkpoints.partial_saves import trainer_tmp_dir

    ours = own_tmp_prefix(out)
    (out / f"{ours}last-0123456789ab").symlink_to("step-00000010")
    (good.path / f"{ours}abc.part").write_bytes(b"half a manifest")
    trainer_tmp_dir(out).mkdir()
    (trainer_tmp_dir(out) / "tmpk2j3h4").write_bytes(b"half a lit_model.pth")
    # other people's files, some with names an old prefix match would have taken
    (out / "tmpUserNotes.txt").write_text("notes\n")
    (out / "tmp8f3k2l").write_bytes(b"x")
    (out / "tmp-runbook-someone-else").mkdir()
    (out / "notes.md").write_text("notes\n")
    (good.path / "tmpxyz").write_bytes(b"someone's")
    found = find_partial_saves(out, read_announced(logs, out, LAYOUT), LAYOUT)
    assert found.partial == [truncated.path.name, no_pth.path.name]
    assert found.temps == sorted([f"{ours}last-0123456789ab", trainer_tmp_dir(out).name, f"{good.path.name}/{ours}abc.part"])
    assert found.foreign == sorted(["notes.md", "step-00000050", "tmp-runbook-someone-else", "tmp8f3k2l",
                                    "tmpUserNotes.txt", "step-00000010/tmpxyz"])
    with_yaml = find_partial_saves(out, read_announced(logs, out, LAYOUT), LAYOUT, require_side_files=("model_config.yaml",))
    assert no_yaml.path.name in with_yaml.partial
    assert find_partial_saves(tmp_path / "missing", frozenset(), LAYOUT).partial == []


# ----------------------------------------------------------------------------------- loading


def test_read_progress_and_weights_only_load(tmp_path):
    ckpt = make_ckpt(tmp_path, 20)
    assert read_progress(ckpt.resume_file) == {"iter_num": 40, "step_count": 20}


def test_rescaled_copy_doubles_iter_num_and_leaves_source_identical(tmp_path):
    ckpt = make_ckpt(tmp_path, 20)
    before = _sha(ckpt.resume_file)
    dst = tmp_path / "resume" / "lit_model.pth"
    info = rescaled_copy(ckpt.resume_file, dst, 2.0)
    assert info == {"iter_num_before": 40, "iter_num_after": 80, "step_count": 20}
    assert _sha(ckpt.resume_file) == before
    copy = torch.load(dst, weights_only=True)
    orig = torch.load(ckpt.resume_file, weights_only=True)
    assert copy["iter_num"] == 80 and copy["step_count"] == 20
    assert copy["train_dataloader"] == orig["train_dataloader"]
    assert all(torch.equal(copy["model"][k], orig["model"][k]) for k in orig["model"])
    assert not [p for p in dst.parent.iterdir() if p.name.startswith("tmp")]
    assert rescaled_copy(ckpt.resume_file, tmp_path / "r3.pth", 4 / 3 * 1.5)["iter_num_after"] == 80
    assert rescaled_copy(ckpt.resume_file, tmp_path / "r2.pth", 0.5)["iter_num_after"] == 20
    with pytest.raises(ValueError, match="not an integer"):
        rescaled_copy(ckpt.resume_file, tmp_path / "r4.pth", 1 / 3)
    with pytest.raises(ValueError, match="differ"):
        rescaled_copy(ckpt.resume_file, ckpt.resume_file, 2.0)
    assert _sha(ckpt.resume_file) == before


def test_relocating_loader_paths_rewrites_the_file_in_place_and_leaves_no_temp(tmp_path):
    ckpt = make_ckpt(tmp_path / "out", 20)
    old_run, new_run = tmp_path / "run", tmp_path / "replay" / "run"
    state = torch.load(ckpt.resume_file, weights_only=True)
    state["train_dataloader"]["dataset"]["input_dir_path"] = str(old_run / "data" / "abc")
    state["train_dataloader"]["dataset"]["cache"] = [str(old_run), str(tmp_path / "runs-elsewhere")]
    torch.save(state, ckpt.resume_file)
    assert relocate_loader_state(ckpt.resume_file, old_run, new_run) == 2
    loader = torch.load(ckpt.resume_file, weights_only=True)["train_dataloader"]["dataset"]
    assert loader["input_dir_path"] == str(new_run / "data" / "abc")
    assert loader["cache"] == [str(new_run), str(tmp_path / "runs-elsewhere")]   # a prefix of a name is not the folder
    assert sorted(os.listdir(ckpt.path)) == sorted(["lit_model.pth", "model_config.yaml", "hyperparameters.yaml",
                                                   "tokenizer.json", "tokenizer_config.json"])
    before = _sha(ckpt.resume_file)
    assert relocate_loader_state(ckpt.resume_file, old_run, new_run) == 0 and _sha(ckpt.resume_file) == before   # nothing to change


def test_find_nonfinite_tensors(tmp_path):
    ckpt = make_ckpt(tmp_path, 20)
    assert find_nonfinite_tensors(ckpt.resume_file) == []
    state = torch.load(ckpt.resume_file, weights_only=True)
    state["model"]["0.weight"][3, 5] = float("nan")
    state["model"]["1.bias"][0] = float("inf")
    torch.save(state, ckpt.resume_file)
    assert find_nonfinite_tensors(ckpt.resume_file) == ["0.weight", "1.bias"]
    assert find_nonfinite_tensors(ckpt.resume_file, limit=1) == ["0.weight"]
    assert verify_checkpoint(ckpt).ok  # NaN weights are a valid file: verify is about bytes


# ------------------------------------------------------------------------- parallel scan
def test_split_by_bytes_keeps_members_whole_contiguous_and_balanced():
    from engine.trainers.litgpt.pth_scan import split_by_bytes

    spans = [(i * 10, i * 10 + size, None) for i, size in enumerate([5, 5, 5, 5, 10, 10])]
    groups = split_by_bytes(spans, 2)
    assert [s for g in groups for s in g] == spans and len(groups) == 2
    sizes = [sum(e - s for s, e, _ in g) for g in groups]
    assert abs(sizes[0] - sizes[1]) <= 10, sizes
    assert split_by_bytes(spans, 1) == [spans]
    assert len(split_by_bytes(spans[:1], 4)) == 1  # never an empty group


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_parallel_scan_finds_a_flipped_byte_anywhere_and_hashes_like_sha256(tmp_path, workers):
    from engine.trainers.litgpt.pth_scan import scan_pth

    ckpt = make_ckpt(tmp_path, 10)
    pth = ckpt.resume_file
    assert scan_pth(pth, want_sha256=True, workers=workers, parallel_min_bytes=0) == (None, _sha(pth))
    with zipfile.ZipFile(pth) as zf:
        members = sorted((i for i in zf.infolist() if "/data/" in i.filename), key=lambda i: i.header_offset)
    for info in (members[0], members[-1]):  # one in the first reader's range, one in the last's
        damaged = tmp_path / f"damaged-{info.header_offset}.pth"
        data = bytearray(pth.read_bytes())
        with open(pth, "rb") as f:
            f.seek(info.header_offset)
            name_len, extra_len = struct.unpack("<HH", f.read(30)[26:30])
        data[info.header_offset + 30 + name_len + extra_len] ^= 0xFF
        damaged.write_bytes(bytes(data))
        problem, digest = scan_pth(damaged, want_sha256=True, workers=workers, parallel_min_bytes=0)
        assert problem == f"{damaged.name} member {info.filename!r} fails its CRC (corrupted)" and digest is None


def test_a_watcher_reattaching_to_a_live_trainer_leaves_its_unsealed_save_alone(tmp_path):
    """sealed_only (engine/watch/startup.py, a live trainer): a folder the trainer is still writing looks corrupt;
    moving it away would crash that save. Sealed checkpoints are still rechecked, a damaged one quarantined."""
    from engine.checkpoints.catalog import CheckpointCatalog
    from engine.core.run_folder import RunFolder
    from engine.trainers.litgpt.adapter import LitGPTAdapter

    out_dir, run_dir = tmp_path / "out", tmp_path / "run"
    sealed, damaged = make_ckpt(out_dir, 10), make_ckpt(out_dir, 20)
    assert seal_checkpoint(sealed).ok and seal_checkpoint(damaged).ok
    (damaged.path / "model_config.yaml").write_text("changed after sealing\n")
    in_progress = make_ckpt(out_dir, 30)
    in_progress.resume_file.unlink()   # litgpt writes the side files, then renames lit_model.pth in
    catalog = CheckpointCatalog(out_dir, RunFolder(run_dir), run_dir / "quarantine", LitGPTAdapter())

    bad = catalog.refresh(quarantine_corrupt=True, force=True, sealed_only=True)
    assert bad == ["step-00000020"] and not damaged.path.exists()
    assert in_progress.path.is_dir() and catalog.verified == {10}
    assert catalog.refresh(quarantine_corrupt=True, force=True) == ["step-00000030"]   # not sealed_only: judged


def test_a_full_disk_verifies_a_whole_checkpoint_by_its_content_and_seals_it_once_there_is_room(tmpfs, tmp_path):
    """No room for the manifest nor for the `last` link (a real tmpfs, its blocks and inodes taken) must not leave a
    whole save unverified: an unverified one is protected from the prune and skipped by the resume, so a run resumed
    from an older checkpoint fills the disk again with saves it cannot seal, until disk-full escalates (CI saw the
    toy loop 4 times on a 48k tmpfs). The prune keeps what apply_prune refuses (the newest sealed, `last`'s)."""
    from engine.checkpoints.catalog import CheckpointCatalog
    from engine.core.run_folder import RunFolder
    from engine.trainers.litgpt.adapter import LitGPTAdapter
    from tests.conftest import fill

    out_dir, run_dir = tmpfs(tmp_path / "out", "2m,nr_inodes=64"), tmp_path / "run"
    catalog = CheckpointCatalog(out_dir, RunFolder(run_dir), run_dir / "quarantine", LitGPTAdapter())
    sealed = make_ckpt(out_dir, 10)
    assert catalog.refresh() == [] and has_manifest(sealed) and last_link_target(out_dir) == sealed.path
    middle, newest = make_ckpt(out_dir, 20), make_ckpt(out_dir, 30)
    announce(run_dir / "logs", sealed, middle, newest)
    fillers = [fill(out_dir)]
    with pytest.raises(OSError, match="No space left"):
        while True:   # every inode too: not even a symlink fits
            fillers.append(out_dir / f"filler-{len(fillers)}")
            fillers[-1].touch()

    assert catalog.refresh() == [] and catalog.verified == {10, 20, 30} and set(catalog.unsealed) == {20, 30}
    assert not has_manifest(middle) and not has_manifest(newest) and catalog.newest_verified().step == 30
    assert last_link_target(out_dir) == sealed.path   # no room to move it
    pruned = catalog.prune(keep_last_k=1, best_step=None, remove_partial=True, trainer_alive=False)
    assert pruned.deleted == [middle.path.name] and pruned.kept_steps == [10, 30], pruned.summary()
    assert set(catalog.unsealed) == {30}

    for filler in fillers:
        filler.unlink(missing_ok=True)
    (newest.path / "model_config.yaml").write_text("changed after it was verified\n")
    assert catalog.refresh() == [] and catalog.unsealed == {} and has_manifest(newest)
    assert last_link_target(out_dir) == newest.path
    # The manifest holds what was verified, not what is there now: the change is caught by the next check.
    assert catalog.refresh(force=True) == [newest.path.name] and catalog.verified == {10}
