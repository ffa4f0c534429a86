"""A suspect checkpoint's mark (engine/checkpoints/suspects.py mark_suspect, suspect_reason, quarantined_suspects): written
into its manifest, the seal still verifying; read back from out_dir or from the quarantine; refused where there is
no manifest to mark. Real checkpoints (tests/unit/test_checkpoints.py's litgpt layout), real files."""

from __future__ import annotations

import json

from engine.checkpoints.manifest import seal_checkpoint, verify_checkpoint
from engine.checkpoints.store import MANIFEST_NAME, quarantine
from engine.checkpoints.suspects import mark_suspect, quarantined_suspects, suspect_reason
from tests.unit.test_checkpoints import make_ckpt


def test_a_sealed_checkpoint_marked_suspect_keeps_its_seal_and_says_why(tmp_path):
    ckpt = make_ckpt(tmp_path / "out", 10)
    assert seal_checkpoint(ckpt).ok and suspect_reason(ckpt) is None
    assert mark_suspect(ckpt, "the divergence began at step 11") is True
    assert suspect_reason(ckpt) == "the divergence began at step 11"
    assert verify_checkpoint(ckpt).ok                       # the files are intact: only trust is withdrawn
    record = json.loads((ckpt.path / MANIFEST_NAME).read_text())
    assert record["files"] and record["suspect"]["marked_utc"].endswith("Z")


def test_an_unsealed_checkpoint_has_no_manifest_to_mark(tmp_path):
    ckpt = make_ckpt(tmp_path / "out", 10)
    assert mark_suspect(ckpt, "why") is False and suspect_reason(ckpt) is None
    assert not (ckpt.path / MANIFEST_NAME).exists()


def test_a_manifest_that_is_not_a_record_is_not_marked(tmp_path):
    ckpt = make_ckpt(tmp_path / "out", 10)
    (ckpt.path / MANIFEST_NAME).write_text("[1, 2]")
    assert mark_suspect(ckpt, "why") is False and suspect_reason(ckpt) is None
    (ckpt.path / MANIFEST_NAME).write_text('{"files": {}, "suspect": {"reason": 5}}')
    assert suspect_reason(ckpt) is None                     # a reason that is not text is none


def test_the_quarantine_lists_its_suspects_by_name_and_nothing_else(tmp_path):
    quarantine_dir = tmp_path / "quarantine"
    suspect, other = make_ckpt(tmp_path / "out", 10), make_ckpt(tmp_path / "out", 15)
    assert seal_checkpoint(suspect).ok and seal_checkpoint(other).ok
    mark_suspect(suspect, "began 1 step after resuming")
    moved = quarantine(suspect, quarantine_dir, "suspect: began 1 step after resuming")
    quarantine(other, quarantine_dir, "corrupt")
    (quarantine_dir / "not-a-folder.txt").write_text("x")
    assert quarantined_suspects(quarantine_dir) == [(moved.name, "began 1 step after resuming")]
    assert quarantined_suspects(quarantine_dir, limit=0) == []
    assert quarantined_suspects(tmp_path / "missing") == []
