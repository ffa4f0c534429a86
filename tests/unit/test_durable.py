"""engine/core/durable.py: replace-or-nothing writes that keep the file's permissions."""

from __future__ import annotations

import os
import stat

import pytest

from engine.core.durable import atomic_write, atomic_write_text


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_rewritten_file_keeps_its_mode_and_a_new_one_gets_the_umask_default(tmp_path):
    config = tmp_path / "run_config.yaml"
    config.write_text("lr: 0.003\n")
    os.chmod(config, 0o640)
    atomic_write_text(config, "lr: 0.0015\n")
    assert config.read_text() == "lr: 0.0015\n" and mode(config) == 0o640

    mask = os.umask(0)
    os.umask(mask)
    fresh = tmp_path / "sub" / "incident-1.json"
    atomic_write_text(fresh, "{}\n")
    assert mode(fresh) == 0o666 & ~mask  # not mkstemp's 0600


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_text("old\n")

    def explode(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(target, explode)
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
