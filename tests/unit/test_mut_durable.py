"""engine/core/durable.py, the edges its other tests leave open (benchmarks/bench_mutation.py's survivors):
the umask is read without being changed, a write into folders that do not exist yet, a failed write whose
temp file is already gone, gzip_replace's count, and which leftovers remove_stale_temps removes."""

from __future__ import annotations

import gzip
import os

import pytest

from engine.core import durable
from engine.core.durable import TMP_PREFIX, TMP_SUFFIX, atomic_write, atomic_write_text, gzip_replace, remove_stale_temps


def test_reading_the_umask_gives_it_and_leaves_it_as_it_was():
    old = os.umask(0o027)
    try:
        assert durable._read_umask() == 0o027
        assert os.umask(0o027) == 0o027      # unchanged by the read
    finally:
        os.umask(old)


def test_a_text_is_written_into_folders_that_do_not_exist_yet(tmp_path):
    target = tmp_path / "runs" / "r1" / "incidents" / "incident-1.json"
    atomic_write_text(target, "{}\n")
    assert target.read_text() == "{}\n"
    atomic_write_text(target, "{\"n\": 2}\n")    # and again, into folders that now exist
    assert target.read_text() == "{\"n\": 2}\n"


def test_a_failed_write_whose_temp_file_is_already_gone_raises_its_own_error(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_text("old\n")

    def cleaned_then_full(f):
        f.write(b"half")
        assert remove_stale_temps(tmp_path)   # another runbook process cleaned the folder meanwhile
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError) as raised:
        atomic_write(target, cleaned_then_full)
    assert raised.value.errno == 28
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


def test_gzip_replace_leaves_only_the_gz_and_says_the_bytes_saved(tmp_path):
    log = tmp_path / "trainer.log"
    log.write_text("step 1 loss 2.5\n" * 4000)
    size = log.stat().st_size
    saved = gzip_replace(log)
    packed = tmp_path / "trainer.log.gz"
    assert not log.exists() and saved == size - packed.stat().st_size and saved > 0
    assert gzip.decompress(packed.read_bytes()) == b"step 1 loss 2.5\n" * 4000


def test_remove_stale_temps_removes_only_runbooks_own_temp_files(tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"keep")
    names = {
        f"{TMP_PREFIX}abc{TMP_SUFFIX}": "file",         # ours: removed
        f"{TMP_PREFIX}def{TMP_SUFFIX}": "file",         # ours: removed
        f"{TMP_PREFIX}abc.json": "file",                # our prefix, not our suffix: kept
        f"other{TMP_SUFFIX}": "file",                   # our suffix, not our prefix: kept
        f"{TMP_PREFIX}link{TMP_SUFFIX}": "symlink",     # a link, even to a file: kept (and its target)
        f"{TMP_PREFIX}dir{TMP_SUFFIX}": "dir",          # a folder: kept
    }
    folder = tmp_path / "run"
    folder.mkdir()
    for name, kind in names.items():
        if kind == "file":
            (folder / name).write_bytes(b"x")
        elif kind == "symlink":
            (folder / name).symlink_to(outside)
        else:
            (folder / name).mkdir()
    removed = remove_stale_temps(folder)
    assert sorted(removed) == sorted(n for n, kind in names.items() if kind == "file" and n.startswith(TMP_PREFIX)
                                     and n.endswith(TMP_SUFFIX))
    assert sorted(os.listdir(folder)) == sorted(set(names) - set(removed))
    assert outside.read_bytes() == b"keep"


def test_remove_stale_temps_of_a_missing_folder_is_nothing_removed(tmp_path):
    assert remove_stale_temps(tmp_path / "never-made") == []
