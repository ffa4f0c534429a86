"""Actions do their effect themselves, through the typed ports an incident lends them (engine/language/actions/
ports.py), wired by a real Supervisor to its real parts: the trainer control, the checkpoint catalog, the journal."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from engine.checkpoints.store import list_checkpoints
from engine.language.actions import REGISTRY, ActionFailed, ActionResult
from engine.language.actions.ports import ActionPorts
from engine.records.incident import Incident
from engine.trainers import adapter_for
from engine.trainers.run_config import load_config
from engine.watch.supervisor import Supervisor
from runbook.slack import NullNotifier
from tests.unit.test_checkpoints import announce, make_ckpt

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def supervisor(tmp_path) -> Supervisor:
    (tmp_path / "configs").mkdir()
    shutil.copy(REPO / "configs" / "run_config.yaml", tmp_path / "configs" / "run_config.yaml")
    return Supervisor(load_config(tmp_path / "configs" / "run_config.yaml"), [], NullNotifier(), "sha256:test")


def act(ports: ActionPorts, verb: str, **params) -> ActionResult:
    action = REGISTRY[verb]
    return action.apply(action.params.model_validate(params), ports)


def test_compress_logs_gzips_the_finished_logs_of_a_real_run_folder(supervisor):
    logs = supervisor.loaded.folder.logs
    logs.mkdir(parents=True, exist_ok=True)
    big, small = logs / "trainer-001.log", logs / "trainer-002.log"
    big.write_text("iter 1 loss 2.5\n" * 2000)
    small.write_text("iter 1\n")
    ports = supervisor.incidents.ports(Incident(id="incident-1", playbook="disk"))

    result = act(ports, "compress_logs", min_bytes=1000)

    assert result.ok and result.summary.startswith("compressed 1 log(s), saved ")
    assert not big.exists() and gzip.decompress((logs / "trainer-001.log.gz").read_bytes()) == b"iter 1 loss 2.5\n" * 2000
    assert small.read_text() == "iter 1\n"   # under min_bytes: left as it is


def test_prune_checkpoints_deletes_through_the_real_catalog_and_records_it_on_the_incident(supervisor):
    loaded = supervisor.loaded
    announce(loaded.folder.logs, *(make_ckpt(loaded.out_dir, step) for step in (10, 20, 30, 40, 50)))
    supervisor.catalog.refresh(force=True)   # seals them, as the watcher does
    incident = Incident(id="incident-1", playbook="disk")

    result = act(supervisor.incidents.ports(incident), "prune_checkpoints", keep_last_k=2, keep_best=False)

    layout = adapter_for(loaded.config.trainer.kind).layout
    assert [c.step for c in list_checkpoints(loaded.out_dir, layout)] == [40, 50]
    assert result.ok and "deleted 3 checkpoint(s)" in result.summary
    assert sorted(Path(p).name for p in incident.deleted) == ["step-00000010", "step-00000020", "step-00000030"]
    assert incident.freed_bytes > 0


def test_skip_data_reads_the_rollback_of_the_same_incident_and_sets_the_next_launch_s_environment(supervisor):
    incident = Incident(id="incident-1", playbook="divergence")
    ports = supervisor.incidents.ports(incident)
    with pytest.raises(ActionFailed, match="needs a rollback before it"):
        act(ports, "skip_data", margin=2)

    act(ports, "rollback", bad_step=30, steps=0)   # no checkpoint: the resume point is the start

    assert ports.effects.bad_step == 30 and incident.rollback_target_step == 0
    assert supervisor.divergences == [30]   # the session's tracker: the next divergence's previous_bad_step
    result = act(ports, "skip_data", margin=2)
    assert result.ok and "skipping the data of steps 1-32" in result.summary
    assert "RUNBOOK_DATA_SKIP" in supervisor.control.env_in_force()
    kinds = [e["kind"] for e in supervisor.journal.entries()]
    assert kinds.index("divergence_rollback") < kinds.index("env") < kinds.index("data_skipped")


def test_escalate_is_a_fact_of_the_incident_that_its_runner_reads(supervisor):
    ports = supervisor.incidents.ports(Incident(id="incident-1", playbook="oom"))
    act(ports, "escalate", reason="micro_batch_size is already 1")
    assert ports.effects.escalated_reason == "micro_batch_size is already 1" and not ports.effects.resumed
