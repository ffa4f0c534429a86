"""PURE. The secret values runbook knows, from a run config and the environment.

A value printed on its own (a template that prints `trainer.env.WANDB_API_KEY`, a trainer that echoes
its AWS secret) matches no pattern of engine/core/text_safety.py; these values are redacted by value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# A name is secret when one of its _-separated words says so: HF_TOKEN, WANDB_API_KEY,
# AWS_SECRET_ACCESS_KEY, DB_PASSWORD; not TOKENIZERS_PARALLELISM (its word is TOKENIZERS).
_SECRET_WORDS = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL",
                 "CREDENTIALS", "PAT", "AUTH"}
_WORD = re.compile(r"[A-Za-z0-9]+")


def secret_name(name: str) -> bool:
    return any(word.upper() in _SECRET_WORDS for word in _WORD.findall(name))


def secret_values(trainer_env: Mapping[str, str], environ: Mapping[str, str],
                  notifier_env_names: Iterable[str]) -> set[str]:
    """The values of the secret-named variables of the trainer's env and of the environment it inherits,
    and of the variables the notifiers read their tokens from (whatever their names)."""
    values = {v for n, v in {**environ, **trainer_env}.items() if secret_name(n) and _could_be_secret(v)}
    values |= {environ[n] for n in notifier_env_names if n in environ}
    return {v.strip() for v in values if v.strip()}


_NOT_SECRETS = {"true", "false", "yes", "no", "none", "null", "on", "off", "auto", "disabled", "enabled"}


def _could_be_secret(value: str) -> bool:
    """A flag, a number or a path under a secret-sounding name (SSH_AUTH_SOCK=/tmp/ssh-x/agent.1, USE_AUTH=true)
    is no secret: redacting it everywhere would mangle ordinary output (every "true" in a log)."""
    text = value.strip()
    return bool(text) and text.lower() not in _NOT_SECRETS and not text.isdigit() and not text.startswith("/")
