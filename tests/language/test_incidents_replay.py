"""`runbook incidents` and `runbook replay` against real records in a scratch project (no mocks).

Records are made the way the supervisor makes them: the real matcher decides, the real planner
plans, and the dict has the field set of Supervisor.handle_incident + _close_incident.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.records.incident_store import IncidentStore
from engine.language.matcher import AttemptHistory, MatchMemory, decide
from engine.language.planner import plan
from engine.language.loader import load_playbooks
from engine.language.replay import replay as replay_record
from engine.core.state import StateSnapshot
from runbook.cli import app
from engine.trainers.run_config import load_config

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
T0 = 1_800_000_000.0

# The test's own playbooks (the repo's evolve): edits below change these texts.
PLAYBOOKS = {
    "preemption.yaml": """\
name: preemption
description: The trainer was terminated by SIGTERM (Spot reclaim, SLURM preemption, a manual kill).
priority: 90
lesson: A SIGTERM costs at most the steps since the last checkpoint.
inhibits: [hang, unknown-crash]
match:
  exit:
    signals: [SIGTERM]
limits:
  max_attempts: 5
actions:
  - verify_checkpoints: {}
  - resume:
      from: newest_verified
  - record:
      note: "preempted at step {{ state.metrics.step }}"
""",
    "hang.yaml": """\
name: hang
description: The trainer is alive but silent.
priority: 60
match:
  stalled: {seconds: 60}
limits:
  max_attempts: 3
  window: 1h
actions:
  - record:
      note: "no progress for {{ state.seconds_since_progress | round(1) }} s"
  - stop: {}
  - set_env:
      vars: {NCCL_DEBUG: INFO}
    if: "attempt >= 2"
  - resume:
      from: newest_verified
""",
    "unknown_crash.yaml": """\
name: unknown-crash
description: The trainer exited with an error no more specific playbook recognised.
severity: critical
priority: 0
match:
  all:
    - exit: {nonzero: true}
    - not: {exit: {signals: [SIGTERM]}}
limits:
  max_attempts: 1
actions:
  - escalate:
      reason: "no playbook knows this failure"
""",
}


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    (root / "configs").mkdir(parents=True)
    config = (REPO / "configs" / "run_config.yaml").read_text()   # only the test's own playbooks:
    (root / "configs" / "run_config.yaml").write_text(config.replace("  shipped: true", "  shipped: false"))
    (root / "playbooks").mkdir()
    for name, text in PLAYBOOKS.items():
        (root / "playbooks" / name).write_text(text)
    return root


def config_of(project: Path) -> Path:
    return project / "configs" / "run_config.yaml"


def snapshot(**changes) -> StateSnapshot:
    base = {
        "observation": 120, "time": T0, "run_state": "running",
        "trainer": {"pid": 4242, "alive": False, "exit_code": -15, "signal": "SIGTERM", "launches": 1},
        "metrics": {"step": 31, "iter_num": 124, "tokens": 31744, "loss": 4.8, "tokens_per_sec": 9000.0},
        "tail": ["Epoch 1 | iter 124 step 31 | loss train: 4.800, val: n/a | iter time: 50.00 ms"],
        "disk": {"free_bytes": 50_000_000_000, "total_bytes": 100_000_000_000},
        "checkpoints": {"count": 3, "newest_step": 30, "newest_verified_step": 30},
    }
    for key, value in changes.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) else value
    return StateSnapshot.model_validate(base)


def write_record(project: Path, snap: StateSnapshot, opened_at: float, outcome: str = "recovered",
                 resumed_step: int | None = 30, config_after: dict | None = None,
                 history: AttemptHistory | None = None) -> dict:
    """An incident as the engine's own incident runner records it (engine/records/incident.py), at opened_at."""
    from engine.records.incident import ActionRecord, Incident

    loaded = load_config(config_of(project))
    history = history or AttemptHistory()
    outcome_now = decide(snap, loaded.config, load_playbooks(loaded.playbook_paths), MatchMemory(), history)
    decision = outcome_now.decision
    assert decision is not None and decision.kind in ("recover", "escalate")
    playbook = decision.playbook
    attempt = 1 + sum(1 for t in history.fired.get(playbook.name, ()) if opened_at - t < playbook.limits.window)
    steps = plan(playbook, snap, loaded.config, attempt)
    store = IncidentStore(loaded.run_dir, loaded.project_dir / ".runbook" / "incident-counter")
    incident = Incident.open(store.next_id(), playbook, decision, snap, attempt, [s.to_dict() for s in steps],
                             loaded.config.model_dump(mode="json"))
    incident.opened_at = opened_at
    incident.opened_at_iso = dt.datetime.fromtimestamp(opened_at, dt.timezone.utc).isoformat(timespec="seconds")
    incident.actions = [ActionRecord(index=s.index, verb=s.verb, description=s.description, ok=True,
                                     summary=f"{s.verb} done", seconds=0.25) for s in steps]
    after = {**loaded.config.model_dump(mode="json"), **(config_after or {})}
    if resumed_step is not None:
        incident.resumed_from = str(loaded.out_dir / f"step-{resumed_step:08d}" / "lit_model.pth")
        incident.resumed_step = resumed_step
    incident.config_changes = {k: [incident.config_before[k], v] for k, v in (config_after or {}).items()}
    incident.close(outcome, after, tokens_per_step=16 * 64, escalation=None)
    incident.closed_at, incident.recovery_seconds, incident.runbook_seconds = opened_at + 12.5, 12.5, 12.5
    store.write(incident)
    return incident.to_json()


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file():
            h.update(path.read_bytes())
            h.update(str(path.stat().st_mtime_ns).encode())
    return h.hexdigest()


def run(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def two_incidents(project):
    pre = write_record(project, snapshot(), opened_at=T0 + 1)
    hang = write_record(project, snapshot(trainer={"alive": True, "exit_code": None, "signal": None},
                                          seconds_since_progress=95.0, time=T0 + 600),
                        opened_at=T0 + 601, config_after={"lr": 0.0015})
    return pre, hang


# --- runbook incidents -----------------------------------------------------------------------------
def test_list_and_show_table_and_json(project, two_incidents, monkeypatch):
    pre, hang = two_incidents
    monkeypatch.chdir(project)  # the default --config is configs/run_config.yaml here
    listed = run("incidents")
    assert listed.exit_code == 0, listed.output
    assert "incident-1" in listed.stdout and "preemption" in listed.stdout and "hang" in listed.stdout

    rows = json.loads(run("incidents", "--json").stdout)
    assert [r["id"] for r in rows] == ["incident-1", "incident-2"]
    assert rows[0] | {"when": None} == {"id": "incident-1", "when": None, "playbook": "preemption",
                                         "outcome": "recovered", "step": 31, "steps_lost": 1,
                                         "tokens_lost": 1024, "recovery_seconds": 12.5}

    shown = run("incidents", "show", "incident-2", "--config", str(config_of(project)))
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert "hang" in text and "stop" in text and "resume" in text          # actions with results
    assert "lr: 0.003 -> 0.0015" in text                                      # config changes
    assert "iter 124 step 31" in text                                         # log excerpt
    assert json.loads(run("incidents", "show", "incident-1", "--json").stdout) == pre
    monkeypatch.chdir(project.parent)  # the group's --config reaches `show`
    elsewhere = run("incidents", "--config", str(config_of(project)), "show", "incident-1", "--json")
    assert json.loads(elsewhere.stdout) == pre


def test_unknown_id_and_malformed_record_exit_9_and_change_nothing(project, two_incidents):
    config = str(config_of(project))
    half = project / "runs" / "pretrain" / "incidents" / "incident-3.json"
    half.write_text('{"id": "incident-3", "playbook": "preempt')             # a torn write
    before = tree_digest(project)

    unknown = run("incidents", "show", "incident-99", "--config", config)
    assert unknown.exit_code == 9
    assert "no incident-99" in unknown.stderr and "incident-1, incident-2, incident-3" in unknown.stderr
    assert run("incidents", "show", "../../etc/passwd", "--config", config).exit_code == 9

    broken = run("incidents", "show", "incident-3", "--config", config)
    assert broken.exit_code == 9
    assert "incident-3.json is not a readable incident record" in broken.stderr.replace("\n", "")

    listed = run("incidents", "--config", config, "--json")                   # the good ones still listed
    assert listed.exit_code == 9 and [r["id"] for r in json.loads(listed.stdout)] == ["incident-1", "incident-2"]
    assert run("replay", "incident-3", "--config", config).exit_code == 9
    assert run("replay", "--all", "--config", config).exit_code == 9
    assert tree_digest(project) == before


def test_missing_config_exits_3(tmp_path):
    result = run("incidents", "--config", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 3 and "file not found" in result.stderr


# --- runbook replay --------------------------------------------------------------------------------
def test_replay_unchanged_exits_0_and_changes_no_file(project, two_incidents):
    config = str(config_of(project))
    before = tree_digest(project)
    one = run("replay", "incident-1", "--config", config)
    assert one.exit_code == 0, one.output
    assert "unchanged: 'preemption' would recover" in one.stdout
    every = run("replay", "--all", "--config", config)
    assert every.exit_code == 0, every.output
    assert "2 incident(s) replayed: 2 unchanged, 0 changed" in every.stdout
    as_json = [json.loads(line) for line in run("replay", "--all", "--json", "--config", config).stdout.splitlines()]
    assert [(r["id"], r["verdict"]) for r in as_json] == [("incident-1", "unchanged"), ("incident-2", "unchanged")]
    assert tree_digest(project) == before


def test_edited_playbook_planning_another_action_exits_1_with_diff(project, two_incidents):
    config = str(config_of(project))
    playbook = project / "playbooks" / "preemption.yaml"
    text = playbook.read_text()
    playbook.write_text(text.replace("  - verify_checkpoints: {}\n  - resume:",
                                     "  - verify_checkpoints: {}\n  - set_hyperparameters:\n"
                                     "      save_interval: 5\n  - resume:"))
    result = run("replay", "incident-1", "--config", config)
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "CHANGED: 'preemption' would now plan different actions" in out
    assert "+ 2. set_hyperparameters: write save_interval=5" in out
    assert "  1. verify_checkpoints" in out and "  3. resume" in out           # unchanged steps shown plain
    every = run("replay", "--all", "--config", config)
    assert every.exit_code == 1 and "1 unchanged, 1 changed" in every.stdout


def test_wording_only_edit_is_reported_but_exits_0(project, two_incidents):
    playbook = project / "playbooks" / "preemption.yaml"
    playbook.write_text(playbook.read_text().replace("a manual kill", "or a manual kill"))
    result = run("replay", "incident-1", "--config", str(config_of(project)))
    assert result.exit_code == 0, result.output
    assert "was edited since" in result.stdout


def test_playbook_that_no_longer_matches_exits_1(project, two_incidents):
    playbook = project / "playbooks" / "hang.yaml"
    playbook.write_text(playbook.read_text().replace("stalled: {seconds: 60}", "stalled: {seconds: 600}"))
    result = run("replay", "incident-2", "--config", str(config_of(project)))
    assert result.exit_code == 1, result.output
    assert "CHANGED: no playbook would fire now (then: 'hang')" in result.stdout


def test_other_playbooks_via_option_fall_back_to_unclaimed_escalation(project, two_incidents, tmp_path):
    only = tmp_path / "other-playbooks"
    only.mkdir()
    shutil.copy(project / "playbooks" / "hang.yaml", only)
    result = run("replay", "incident-1", "--config", str(config_of(project)), "--playbooks", str(only))
    assert result.exit_code == 1, result.output
    assert "'unclaimed-failure' would fire now (then: 'preemption')" in result.stdout
    assert "+ 1. escalate" in result.stdout


def test_an_unclaimed_failure_replays_against_the_incident_runners_own_fallback():
    from engine.core.config import RunConfig
    from engine.records.incident import Incident
    from engine.language.playbook import FALLBACK_PLAYBOOK
    from engine.language.matcher import Decision
    from engine.language.playbook import build_playbook

    snap = snapshot(trainer={"exit_code": 3, "signal": None})
    fallback = build_playbook(FALLBACK_PLAYBOOK)
    steps = plan(fallback, snap, RunConfig())
    record = Incident.open("incident-1", fallback, Decision("escalate", fallback, "no playbook matched"), snap, 1,
                           [s.to_dict() for s in steps], RunConfig().model_dump(mode="json")).to_json()
    result = replay_record(record, [], RunConfig())
    assert result.verdict == "unchanged", result.render()
    assert (result.now.kind, result.now.playbook) == ("escalate", FALLBACK_PLAYBOOK["name"])
    assert [a.verb for a in result.now.actions] == [a["verb"] for a in record["plan"]] == ["escalate"]


def test_replay_usage_errors(project, two_incidents):
    config = str(config_of(project))
    assert run("replay", "--config", config).exit_code == 2
    assert run("replay", "incident-1", "--all", "--config", config).exit_code == 2
    assert run("replay", "--all", "--execute", "--config", config).exit_code == 2
    bad = project / "playbooks" / "broken.yaml"
    bad.write_text("name: broken\ndescription: x\nmatch: {nope: {}}\nactions: [{stop: {}}]\n")
    result = run("replay", "incident-1", "--config", config)
    assert result.exit_code == 3 and "broken.yaml" in result.stderr


# --- the pure replay: persistence and attempt limits ------------------------------------------------
def test_persistence_is_assumed_for_the_recorded_snapshot(project, two_incidents):
    _pre, hang = two_incidents
    playbook = project / "playbooks" / "hang.yaml"
    playbook.write_text(playbook.read_text().replace("limits:", "for: {observations: 3, seconds: 20}\nlimits:"))
    loaded = load_config(config_of(project))
    result = replay_record(hang, load_playbooks(loaded.playbook_paths), loaded.config, earlier=[hang])
    assert result.verdict == "edited" and not result.changed
    assert any("assumed 'hang' matched for its whole `for:` (3 observation(s), 20 s)" in n for n in result.notes)


def test_attempt_history_is_rebuilt_from_earlier_records(project):
    playbook = project / "playbooks" / "hang.yaml"
    playbook.write_text(playbook.read_text().replace("max_attempts: 3", "max_attempts: 2"))
    hung = dict(trainer={"alive": True, "exit_code": None, "signal": None}, seconds_since_progress=95.0)
    first = write_record(project, snapshot(**hung, time=T0), opened_at=T0 + 1)
    second = write_record(project, snapshot(**hung, time=T0 + 100), opened_at=T0 + 101,
                          history=AttemptHistory({"hang": (T0 + 1,)}))
    # `attempt` in guards: the second firing planned the `if: attempt >= 2` step, the first skipped it.
    assert [s["skipped"] is None for s in first["plan"]] == [True, True, False, True]
    assert [s["skipped"] is None for s in second["plan"]] == [True, True, True, True]
    history = AttemptHistory({"hang": (T0 + 1, T0 + 101)})
    third = write_record(project, snapshot(**hung, time=T0 + 200), opened_at=T0 + 201, outcome="escalated",
                         resumed_step=None, history=history)
    assert third["decision"] == "escalate"
    loaded = load_config(config_of(project))
    playbooks = load_playbooks(loaded.playbook_paths)
    everything = [first, second, third]
    assert replay_record(third, playbooks, loaded.config, earlier=everything).verdict == "unchanged"
    assert replay_record(first, playbooks, loaded.config, earlier=everything).verdict == "unchanged"
    assert replay_record(second, playbooks, loaded.config, earlier=everything).verdict == "unchanged"
    # Without the earlier records the third would look like a fresh recovery: a changed decision.
    assert replay_record(third, playbooks, loaded.config, earlier=[]).verdict == "different-decision"
    result = run("replay", "--all", "--config", str(config_of(project)))
    assert result.exit_code == 0, result.output


# --- --execute: preparation (the full run is in tests/runs/test_replay_execute.py) ------------------------
def test_execute_refuses_when_the_checkpoint_is_gone_and_creates_nothing(project, two_incidents):
    before = tree_digest(project)
    result = run("replay", "incident-1", "--execute", "--config", str(config_of(project)))
    assert result.exit_code == 9, result.output
    assert "step 30) is no longer in" in result.stderr.replace("\n", "")
    assert tree_digest(project) == before  # no replay folder either


def test_prepare_replay_run_copies_relocates_and_leaves_the_original_alone(project, two_incidents):
    import torch

    from engine.checkpoints.manifest import seal_checkpoint, verify_checkpoint
    from engine.checkpoints.store import list_checkpoints
    from engine.trainers.litgpt.resume import read_progress
    from runbook.commands.replay_execute import prepare_replay_run
    from tests.unit.test_checkpoints import make_ckpt

    _pre, hang = two_incidents  # resumed from step 30; config_after halved lr
    loaded = load_config(config_of(project))
    ckpt = make_ckpt(loaded.out_dir, 30, side_files=("model_config.yaml", "hyperparameters.yaml"))
    state = torch.load(ckpt.resume_file, weights_only=True)
    cache = str(loaded.run_dir / "data" / "95d66cac0314a992" / "train" / "train")
    state["train_dataloader"]["dataset"]["input_dir_path"] = cache  # what litdata stores
    torch.save(state, ckpt.resume_file)
    assert seal_checkpoint(ckpt).ok
    before = tree_digest(project / "runs" / "pretrain") + tree_digest(loaded.out_dir) + tree_digest(project / "configs")

    when = dt.datetime(2027, 1, 15, 8, 0, tzinfo=dt.timezone.utc)
    config_path = prepare_replay_run(hang, loaded, loaded.playbook_paths, now=when)
    folder = project / "runs" / "replay-incident-2-20270115T080000Z"
    assert config_path == folder / "configs" / "run_config.yaml"
    replayed = load_config(config_path)
    assert (replayed.run_dir, replayed.out_dir) == (folder / "run", folder / "checkpoints")
    assert replayed.config.lr == 0.0015 and replayed.playbook_paths == loaded.playbook_paths
    assert replayed.data_path("train_dir") == loaded.data_path("train_dir")
    [copy] = list_checkpoints(replayed.out_dir, ckpt.layout)
    assert copy.step == 30 and verify_checkpoint(copy).ok and read_progress(copy.resume_file)["step_count"] == 30
    moved = torch.load(copy.resume_file, weights_only=True)["train_dataloader"]["dataset"]["input_dir_path"]
    assert moved == str(folder / "run" / "data" / "95d66cac0314a992" / "train" / "train")
    assert json.loads((folder / "replay-origin.json").read_text())["loader_paths_relocated"] == 1
    after = tree_digest(project / "runs" / "pretrain") + tree_digest(loaded.out_dir) + tree_digest(project / "configs")
    assert after == before
    # A second replay in the same second gets its own folder.
    assert prepare_replay_run(hang, loaded, loaded.playbook_paths, now=when).parent.parent.name.endswith("Z-1")


def test_a_record_written_by_runbook_78fd88e_still_loads_and_replays(project, monkeypatch):
    """Records from before the typed Incident (schema_version absent = 1) load as they are, keep
    every key, and `runbook replay` judges them against today's playbooks."""
    import json

    from engine.records.incident import Incident
    from engine.records.incident_store import IncidentStore

    old = json.loads((REPO / "tests" / "data" / "incident-written-by-78fd88e.json").read_text())
    assert "schema_version" not in old
    loaded = load_config(config_of(project))
    folder = loaded.run_dir / "incidents"
    folder.mkdir(parents=True)
    (folder / "incident-1.json").write_text(json.dumps(old))
    incident = IncidentStore(loaded.run_dir).read("incident-1")
    assert isinstance(incident, Incident) and incident.schema_version == 1
    assert incident.playbook == "preemption" and incident.outcome == "recovered" and incident.actions[0].ok
    assert set(old) <= set(incident.to_json())                       # nothing the old writer wrote is lost
    assert incident.state.trainer.signal == "SIGTERM"                 # the snapshot types again

    monkeypatch.chdir(project)
    replayed = run("replay", "incident-1", "--playbooks", str(REPO / "playbooks"))   # today's shipped ones
    assert replayed.exit_code == 0, replayed.output
    assert "preemption" in replayed.output
    changed = run("replay", "incident-1")   # this project's preemption playbook lost two actions since
    assert changed.exit_code == 1 and "advise_save_interval" in changed.output, changed.output
    shown = run("incidents", "show", "incident-1")
    assert shown.exit_code == 0, shown.output
