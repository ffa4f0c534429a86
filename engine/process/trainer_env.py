"""The environment every trainer launch gets, whatever its adapter put in: runbook's own secrets taken
out, and one experiment-tracker run id that belongs to the run folder.

The trainer runs third-party code (litgpt, its loggers, user callbacks) and may print or upload its
environment; the Slack token and webhook URL are runbook's, so they never reach it.

WANDB_RUN_ID is drawn at random once and kept in the run folder (RunFolder.wandb_run_id): a hash of
the run_dir path, as before, changed when the same project was mounted at another path (a new Spot
node), which started a new W&B run instead of resuming the old one.
"""

from __future__ import annotations

import re
import secrets

from engine.core.durable import atomic_write_text
from engine.core.notifier import SlackSettings
from engine.core.run_folder import RunFolder

SECRET_PREFIX = "RUNBOOK_SLACK_"
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def secret_names(env: dict[str, str], slack: SlackSettings) -> set[str]:
    """PURE. The variables of `env` the trainer must not see: those the Slack settings name, and RUNBOOK_SLACK_*."""
    named = {slack.bot_token_env, slack.webhook_url_env}
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


def trainer_environment(env: dict[str, str], folder: RunFolder, slack: SlackSettings) -> dict[str, str]:
    """`env` as the trainer gets it. A WANDB_RUN_ID already set (the user's shell, trainer.env) wins."""
    clean = {name: value for name, value in env.items() if name not in secret_names(env, slack)}
    clean.setdefault("WANDB_RUN_ID", wandb_run_id(folder))
    return clean
