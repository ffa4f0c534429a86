"""The trainer's environment (engine/process/trainer_env.py), as the real toy trainer under a real `runbook watch`
records it: the secrets of runbook's receivers (Slack, webhook, e-mail) never reach it, and its WANDB_RUN_ID belongs to the run folder,
so a project moved to another path (a new Spot node's mount) relaunches into the same W&B run."""

from __future__ import annotations

import json
import shutil
import signal

from tests.conftest import REPO, Project, stop_process, wait_for
from tests.runs.test_toy_trainer import make_toy_project, run_toy

SECRETS = {"MY_BOT_TOKEN": "xoxb-secret", "MY_HOOK_URL": "https://hooks.slack.test/secret",
           "RUNBOOK_SLACK_BOT_TOKEN": "xoxb-default", "RUNBOOK_SLACK_SIGNING_SECRET": "signing",
           "OPS_HOOK_URL": "https://hooks.example.test/ops-secret", "OPS_SMTP_PASSWORD": "smtp-secret"}
RECEIVERS = [{"name": "ops", "kind": "webhook", "url_env": "OPS_HOOK_URL", "match": {"severities": ["critical"]}},
             {"name": "mail", "kind": "email", "host": "127.0.0.1", "port": 9, "from": "runbook@example.test",
              "to": ["oncall@example.test"], "password_env": "OPS_SMTP_PASSWORD"}]


def _environments(env_file) -> list[dict]:
    return [json.loads(line) for line in env_file.read_text().splitlines()] if env_file.exists() else []


def test_the_trainer_never_sees_the_receivers_secrets(tmp_path, monkeypatch):
    project = make_toy_project(tmp_path / "project", step_seconds=0.0)
    env_file = tmp_path / "trainer-env.jsonl"
    project.set(notifications={"slack": {"enabled": False, "bot_token_env": "MY_BOT_TOKEN", "webhook_url_env": "MY_HOOK_URL"},
                               "receivers": RECEIVERS},
                trainer={"extra": {"step_seconds": 0.0, "env_file": str(env_file)}, "env": {"FROM_TRAINER_ENV": "1"}})
    for name, value in {**SECRETS, "RUNBOOK_TEST_VISIBLE": "yes"}.items():
        monkeypatch.setenv(name, value)   # the watcher's environment; project.watch passes os.environ on
    run_toy(project)
    [seen] = _environments(env_file)
    assert not set(SECRETS) & set(seen), sorted(set(SECRETS) & set(seen))
    assert not any(value in json.dumps(seen) for value in SECRETS.values())
    assert seen["RUNBOOK_TEST_VISIBLE"] == "yes" and seen["FROM_TRAINER_ENV"] == "1"   # everything else passes
    assert seen["WANDB_RUN_ID"] == (project.run_dir / "wandb-run-id").read_text().strip()


def test_the_wandb_run_id_survives_moving_the_project_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    project = make_toy_project(tmp_path / "node-a" / "project", step_seconds=0.1)   # 40 steps: 4 s
    env_file = tmp_path / "trainer-env.jsonl"
    project.set(trainer={"extra": {"step_seconds": 0.1, "env_file": str(env_file)}})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        wait_for(lambda: len(_environments(env_file)) == 1, timeout=30, what="the first launch")
        watcher.send_signal(signal.SIGTERM)   # a Spot reclaim of the whole node: watcher and trainer stop
        assert watcher.wait(timeout=60) == 7, project.watch_output()
    finally:
        stop_process(watcher)
    [first] = _environments(env_file)

    moved = Project(tmp_path / "node-b" / "mnt" / "project")
    moved.root.parent.mkdir(parents=True)
    shutil.move(project.root, moved.root)
    run_toy(moved)
    second = _environments(env_file)[-1]
    assert len(_environments(env_file)) == 2 and first["WANDB_RUN_ID"].startswith("runbook-")
    assert second["WANDB_RUN_ID"] == first["WANDB_RUN_ID"]
    assert (moved.run_dir / "wandb-run-id").read_text().strip() == first["WANDB_RUN_ID"]
    assert json.loads((moved.out_dir / "final" / "state.json").read_text())["step"] == 40   # it resumed and finished


def test_a_wandb_run_id_set_by_the_user_wins(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.0)
    env_file = tmp_path / "trainer-env.jsonl"
    project.set(trainer={"extra": {"step_seconds": 0.0, "env_file": str(env_file)}, "env": {"WANDB_RUN_ID": "my-own-run"}})
    run_toy(project)
    assert _environments(env_file)[0]["WANDB_RUN_ID"] == "my-own-run"
