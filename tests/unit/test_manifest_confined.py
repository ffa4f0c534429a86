"""Issue 26 item 7: manifest entries are confined to their checkpoint folder and bounded in size.

A manifest naming `/etc/hostname`, `../../../../x`, a symlink out of the folder, a FIFO, or a 50 GB
sparse side file is a bad manifest: verify says so at once and reads or hashes none of them.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from engine.checkpoints import manifest
from engine.checkpoints.manifest import seal_checkpoint, verify_checkpoint
from engine.checkpoints.store import MANIFEST_NAME
from tests.unit.test_checkpoints import make_ckpt


def _with_entry(tmp_path, name, make=None):
    ckpt = make_ckpt(tmp_path / "out", 10)
    assert seal_checkpoint(ckpt).ok
    if make:
        make(ckpt.path)
    manifest = ckpt.path / MANIFEST_NAME
    data = json.loads(manifest.read_text())
    data["files"][name] = {"size": 1, "sha256": "0" * 64}
    manifest.write_text(json.dumps(data))
    return ckpt


def _link_out(folder):
    os.symlink("/etc/hostname", folder / "linked.yaml")


def _fifo(folder):
    os.mkfifo(folder / "pipe")


def _sparse(folder):
    with open(folder / "huge.bin", "wb") as fh:
        fh.truncate(50 * 2**30)


CASES = [
    ("/etc/hostname", None, "not a file name inside"),
    ("../../../../x", None, "not a file name inside"),
    ("sub/../../x", None, "not a file name inside"),
    ("..", None, "not a file name inside"),
    ("", None, "not a file name inside"),
    ("a\x00b", None, "not a file name inside"),
    (MANIFEST_NAME, None, "not a file name inside"),
    ("linked.yaml", _link_out, "is a symlink"),
    ("pipe", _fifo, "not a regular file"),
    ("huge.bin", _sparse, "more than"),
    ("absent.bin", None, "listed in"),
]


@pytest.mark.parametrize("name,make,reason", CASES)
def test_an_entry_outside_the_folder_is_a_bad_manifest_and_never_read(tmp_path, monkeypatch, name, make, reason):
    ckpt = _with_entry(tmp_path, name, make)
    hashed = []
    real = manifest.sha256_file
    monkeypatch.setattr(manifest, "sha256_file", lambda p, *a, **k: hashed.append(str(p)) or real(p, *a, **k))
    start = time.monotonic()
    result = verify_checkpoint(ckpt)
    assert time.monotonic() - start < 5
    assert not result.ok and reason in result.reason, result.reason
    assert not any(name and name in h for h in hashed), hashed


def test_a_sealed_checkpoint_still_verifies(tmp_path):
    ckpt = make_ckpt(tmp_path / "out", 10)
    assert seal_checkpoint(ckpt).ok and verify_checkpoint(ckpt).ok
