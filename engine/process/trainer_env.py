"""The environment every trainer launch gets, whatever its adapter put in: runbook's own secrets taken
out, and one experiment-tracker run id that belongs to the run folder.

The trainer runs third-party code (litgpt, its loggers, user callbacks) and may print or upload its
environment; the receivers' tokens, URLs and passwords are runbook's, so they never reach it.

TMPDIR stays short (short_tmpdir): the trainer's TMPDIR is a folder inside out_dir (Lightning's save is a
rename from there), and under a long out_dir multiprocessing's socket path (TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX)
passed the 107 characters AF_UNIX allows: litgpt's data loader workers died with `OSError: AF_UNIX path too
long` and the trainer deadlocked at start-up. A long TMPDIR is handed over as a short link of runbook's in
/tmp to the same folder: the files still land on out_dir's filesystem, so the save's rename stays atomic.

WANDB_RUN_ID is drawn at random once and kept in the run folder (RunFolder.wandb_run_id): a hash of
the run_dir path, as before, changed when the same project was mounted at another path (a new Spot
node), which started a new W&B run instead of resuming the old one.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import tempfile
from pathlib import Path

from engine.core.durable import atomic_write_text
from engine.core.notifier import NotificationSettings, SlackSettings
from engine.core.run_folder import RunFolder

SECRET_PREFIX = "RUNBOOK_SLACK_"
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# sun_path holds 107 characters; multiprocessing adds 32 (/pymp-XXXXXXXX/listener-XXXXXXXX), leave room for more
MAX_TMPDIR_CHARS = 64
SHORT_TMP_ROOT = Path("/tmp")


def secret_names(env: dict[str, str], notifications: NotificationSettings | SlackSettings) -> set[str]:
    """PURE. The variables of `env` the trainer must not see: those any receiver's settings name, and RUNBOOK_SLACK_*."""
    named = notifications.secret_env_names()
    return {name for name in env if name in named or name.startswith(SECRET_PREFIX)}


def wandb_run_id(folder: RunFolder) -> str:
    """This run's id, made on the first launch and read back on every later one (wherever the folder is)."""
    path = folder.wandb_run_id
    try:
        kept = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        kept = ""
    if RUN_ID.match(kept):
        return kept
    run_id = "runbook-" + secrets.token_hex(6)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, run_id + "\n")
    return run_id


def trainer_environment(env: dict[str, str], folder: RunFolder,
                        notifications: NotificationSettings | SlackSettings) -> dict[str, str]:
    """`env` as the trainer gets it. A WANDB_RUN_ID already set (the user's shell, trainer.env) wins."""
    clean = {name: value for name, value in env.items() if name not in secret_names(env, notifications)}
    clean.setdefault("WANDB_RUN_ID", wandb_run_id(folder))
    if clean.get("TMPDIR"):
        clean["TMPDIR"] = short_tmpdir(clean["TMPDIR"])
    return clean


def short_link_name(tmpdir: str, root: Path = SHORT_TMP_ROOT) -> Path:
    """PURE. The short link's path: fixed by the folder's absolute path (every launch and the warm spare
    of one out_dir reuse one link) and by the user (another user's link is not ours)."""
    digest = hashlib.sha256(os.path.abspath(tmpdir).encode()).hexdigest()[:12]
    return root / f"runbook-{os.getuid()}-{digest}"


def short_tmpdir(tmpdir: str, root: Path = SHORT_TMP_ROOT) -> str:
    """`tmpdir` itself when it is short enough for a socket path inside it, else a short link to it that
    runbook made (or made before: a link to exactly this folder). A name taken by anything else is left
    alone, and a fresh folder of runbook's own in `root` holds the link instead."""
    if len(tmpdir) <= MAX_TMPDIR_CHARS:
        return tmpdir
    target = os.path.abspath(tmpdir)
    link = short_link_name(tmpdir, root)
    try:
        if link.is_symlink() and os.readlink(link) == target:
            return str(link)
        if not os.path.lexists(link):
            os.symlink(target, link)
            return str(link)
        # the name is somebody else's: a fresh folder, certainly ours, holds the link
        holder = Path(tempfile.mkdtemp(prefix="runbook-", dir=root))
        (holder / "t").symlink_to(target)
        return str(holder / "t")
    except OSError:
        return tmpdir   # no writable /tmp: the long path, as before (a data loader with workers may fail)


def release_short_tmpdir(tmpdir: str, root: Path = SHORT_TMP_ROOT) -> bool:
    """Remove the short link to `tmpdir` once no trainer uses it: only a link that names exactly this folder
    (runbook's, by short_tmpdir); anything else under that name is left alone. True when one was removed."""
    link = short_link_name(tmpdir, root)
    try:
        if link.is_symlink() and os.readlink(link) == os.path.abspath(tmpdir):
            link.unlink()
            return True
    except OSError:
        pass
    return False
