"""Hostile checkpoint files of the script and hf-trainer kinds, made for real: `runbook verify` answers each with
one line naming the file and why, exits non-zero, and never unpacks more than it caps (a zip bomb blocked the
watcher's loop for 29 s and passed as verified; a corrupt deflate stream killed `watch` with exit 12)."""

from __future__ import annotations

import json
import random
import struct
import zipfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from engine.checkpoints.manifest import verify_checkpoint
from engine.checkpoints.store import list_checkpoints
from engine.trainers import adapter_for
from engine.trainers.run_config import load_config
from engine.trainers.script import formats
from runbook.cli import app
from runbook.exit_codes import ExitCode
from tests.trainers.projects import TRAINERS, make_project
from tests.trainers.test_formats import hf_checkpoint

runner = CliRunner()


def verify(config: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["verify", str(config)])
    assert result.exception is None or isinstance(result.exception, SystemExit), (result.output, result.exception)
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def reason(config: Path, name: str) -> str:
    """`runbook verify`'s answer (exit non-zero, the file named, no traceback) and the whole reason it prints, as
    the engine gives it (the table wraps it at the terminal's width)."""
    code, output = verify(config)
    assert code == ExitCode.INVALID and f"CORRUPT: {name}: " in output, output
    [found] = list_checkpoints(config.parent.parent / "checkpoints" / "pretrain", adapter_for(load_config(config).config.trainer.kind).layout)
    why = verify_checkpoint(found).reason
    assert why is not None and "\n" not in why
    return why


def script_checkpoint(root: Path) -> tuple[Path, Path]:
    """A script project and its step-4 state.pt, a real torch.save."""
    project = make_project(root, TRAINERS["script"])
    folder = root / "checkpoints" / "pretrain" / "step-000004"
    folder.mkdir(parents=True)
    torch.save({"step": 4, "model": {"w": torch.ones(64)}}, folder / "state.pt")
    return project.config, folder / "state.pt"


def deflated(path: Path, member: str, chunks: int, chunk: bytes) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, archive.open(member, "w") as fh:
        for _ in range(chunks):
            fh.write(chunk)


def patch_headers(path: Path, local_at: int, central_at: int, value: bytes) -> None:
    """Overwrite the same field of a one-member zip's local header (offset local_at) and central entry (central_at)."""
    data = bytearray(path.read_bytes())
    local, central = data.index(b"PK\x03\x04"), data.index(b"PK\x01\x02")
    data[local + local_at: local + local_at + len(value)] = value
    data[central + central_at: central + central_at + len(value)] = value
    path.write_bytes(bytes(data))


def test_a_zip_bomb_state_pt_is_refused_by_its_ratio_before_anything_is_inflated(tmp_path):
    config, state = script_checkpoint(tmp_path)
    deflated(state, "archive/data.pkl", 64, bytes(1 << 20))    # 64 MiB of zeros in ~64 KB
    assert state.stat().st_size < 200_000
    problem = formats.zip_problem(state)
    assert problem is not None and "not a checkpoint this runbook will read" in problem
    assert f"at most {formats.MAX_RATIO}:1" in problem            # the cap hit: nothing was inflated to judge it
    assert "state.pt: not a checkpoint this runbook will read" in reason(config, "state.pt")


def test_deflated_members_past_the_size_cap_are_refused_unread(tmp_path, monkeypatch):
    _, state = script_checkpoint(tmp_path)
    deflated(state, "archive/data.pkl", 4, random.Random(0).randbytes(1 << 20))   # 4 MiB at about 1:1
    monkeypatch.setattr(formats, "MAX_INFLATED", 1 << 20)
    problem = formats.zip_problem(state)
    assert problem is not None and "more than 1048576 bytes" in problem


def test_a_corrupt_deflate_stream_is_a_corrupt_checkpoint_not_a_crash(tmp_path):
    config, state = script_checkpoint(tmp_path)
    deflated(state, "archive/data.pkl", 1, json.dumps(list(range(20_000))).encode())
    data = bytearray(state.read_bytes())
    local = data.index(b"PK\x03\x04")
    name_len, extra_len = struct.unpack("<HH", data[local + 26: local + 30])
    start = local + 30 + name_len + extra_len
    data[start: start + 64] = b"\xff" * 64                        # deflate block type 3: zlib.error
    state.write_bytes(bytes(data))
    assert "state.pt: member archive/data.pkl: its compressed data is corrupt" in reason(config, "state.pt")


def test_an_encrypted_member_is_refused(tmp_path):
    config, state = script_checkpoint(tmp_path)
    state.unlink()
    with zipfile.ZipFile(state, "w") as archive:
        archive.writestr("archive/data.pkl", b"x" * 100)
    patch_headers(state, 6, 8, struct.pack("<H", 1))             # general purpose flag bit 0: encrypted
    assert "member archive/data.pkl is encrypted" in reason(config, "state.pt")


def test_a_member_of_an_unknown_compression_is_refused(tmp_path):
    config, state = script_checkpoint(tmp_path)
    state.unlink()
    with zipfile.ZipFile(state, "w") as archive:
        archive.writestr("archive/data.pkl", b"x" * 100)
    patch_headers(state, 8, 10, struct.pack("<H", 99))           # compression method 99
    assert "compression method 99" in reason(config, "state.pt")


def hf_model(root: Path) -> tuple[Path, Path]:
    project = make_project(root, TRAINERS["hf-trainer"])
    folder = root / "checkpoints" / "pretrain" / "checkpoint-4"
    hf_checkpoint(folder, 4)
    return project.config, folder


def safetensors_bytes(header: object, data: bytes = b"", length: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


HEADERS = {   # variant -> (file bytes, the reason's words)
    "length past the file": (safetensors_bytes({}, length=1 << 40), "header of 1099511627776 bytes"),
    "not JSON": (safetensors_bytes(b"{not json"), "its header is not JSON"),
    "not a mapping": (safetensors_bytes([1, 2]), "its header is not a mapping"),
    "offsets past the end": (safetensors_bytes({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1 << 30]}}, bytes(16)),
                             "header describes"),
    "offsets not numbers": (safetensors_bytes({"w": {"dtype": "F32", "shape": [4], "data_offsets": "0-16"}}, bytes(16)),
                            "'w' has data_offsets '0-16'"),
    "offsets backwards": (safetensors_bytes({"w": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}}, bytes(16)),
                          "'w' has data_offsets [16, 0]"),
    "entry not a mapping": (safetensors_bytes({"w": [0, 16]}, bytes(16)), "'w' has data_offsets None"),
    "nested too deep": (safetensors_bytes(b"[" * 100_000 + b"]" * 100_000), "nested too deep"),
}


@pytest.mark.parametrize("variant", HEADERS)
def test_a_malformed_safetensors_header_is_one_line_from_verify(tmp_path, variant):
    config, folder = hf_model(tmp_path)
    content, words = HEADERS[variant]
    (folder / "model.safetensors").write_bytes(content)
    assert words in reason(config, "model.safetensors")


def test_a_deeply_nested_trainer_state_json_is_one_line_from_verify(tmp_path):
    config, folder = hf_model(tmp_path)
    (folder / "trainer_state.json").write_text("[" * 200_000 + "]" * 200_000)
    assert "trainer_state.json: not JSON this runbook will read: nested too deep" in reason(config, "trainer_state.json")
