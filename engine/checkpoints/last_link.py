"""``out_dir/last``: runbook's relative symlink to the newest verified checkpoint, replaced atomically, never
over a file or folder of someone else's that has that name.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from engine.core.durable import fsync_dir

from engine.checkpoints.store import LAST_LINK_NAME, Checkpoint, own_tmp_prefix


def last_in_the_way(out_dir: Path) -> str | None:
    """Why ``out_dir/last`` cannot be runbook's link (something else has that name: a folder, a file), or None.
    Renaming the link over it would fail on a folder (IsADirectoryError) and delete a file."""
    link = Path(out_dir) / LAST_LINK_NAME
    if not os.path.lexists(link) or link.is_symlink():
        return None
    kind = "a folder" if link.is_dir() else "a file"
    return (f"{link} is {kind}, not runbook's `last` link: runbook never moves or deletes it, and cannot keep "
            f"`last` pointing at the newest checkpoint while it is there. Rename or move it out of {out_dir}")


def update_last_link(out_dir: Path, ckpt: Checkpoint) -> bool:
    """Point ``out_dir/last`` at ckpt's folder: relative (out_dir may be moved or mounted
    elsewhere), made at a temp name and renamed over the old link, so it never is absent. False (nothing
    changed) where a folder or file of someone else's is named ``last`` (last_in_the_way): it stays as it is."""
    out_dir = Path(out_dir)
    if last_in_the_way(out_dir) is not None:
        return False
    if not ckpt.path.is_dir():
        raise FileNotFoundError(f"checkpoint folder {ckpt.path} does not exist")
    target = os.path.relpath(os.path.abspath(ckpt.path), os.path.abspath(out_dir))
    tmp = out_dir / f"{own_tmp_prefix(out_dir)}last-{uuid.uuid4().hex[:12]}"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, out_dir / LAST_LINK_NAME)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(out_dir)
    return True


def last_link_target(out_dir: Path) -> Path | None:
    """The absolute folder ``out_dir/last`` names (it may no longer exist), or None."""
    link = Path(out_dir) / LAST_LINK_NAME
    if not link.is_symlink():
        return None
    return Path(os.path.normpath(os.path.join(os.path.abspath(out_dir), os.readlink(link))))
