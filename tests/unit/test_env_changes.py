"""A remedy's environment does no harm (engine/process/env_changes.py) and a diagnosis does not outlive its
launch: DETAIL is never passed where it kills the ranks, diagnostic variables are journaled as such and
lifted, and a restarted watcher knows which are which."""

from __future__ import annotations

from engine.process.env_changes import on_gpu, without_known_crashes
from engine.records.journal import Journal


def test_detail_is_lowered_to_info_on_a_cpu_and_kept_on_a_gpu():
    env = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "NCCL_DEBUG": "INFO"}
    safe, notes = without_known_crashes(env, gpu=False)
    assert safe == {"TORCH_DISTRIBUTED_DEBUG": "INFO", "NCCL_DEBUG": "INFO"}
    assert len(notes) == 1 and "SIGSEGV" in notes[0]
    assert without_known_crashes(env, gpu=True) == (env, [])
    assert without_known_crashes({"TORCH_DISTRIBUTED_DEBUG": "detail"}, gpu=False)[0]["TORCH_DISTRIBUTED_DEBUG"] == "INFO"


def test_the_device_decides_gpu_or_cpu(tmp_path):
    driver = tmp_path / "version"
    assert not on_gpu("cpu", str(driver))
    assert not on_gpu("auto", str(driver))
    driver.write_text("NVRM version: 550")
    assert on_gpu("auto", str(driver)) and on_gpu("cuda", str(driver))


def test_diagnostic_variables_are_journaled_apart_and_lifted(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append("env", vars={"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "INFO"}, diagnostic=True)
    journal.append("env", vars={"NCCL_P2P_DISABLE": "1"}, diagnostic=False)
    state = journal.replay()
    assert state.diagnostic_env == {"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "INFO"}
    assert state.extra_env == {"NCCL_P2P_DISABLE": "1"}
    journal.append("env_lifted", names=["NCCL_DEBUG", "TORCH_DISTRIBUTED_DEBUG"], reason="launch 2 trained 20 steps")
    state = journal.replay()
    assert state.diagnostic_env == {} and state.extra_env == {"NCCL_P2P_DISABLE": "1"}
    # the newest setting of a name decides: set for good after being a diagnosis, it is no longer lifted
    journal.append("env", vars={"NCCL_DEBUG": "WARN"}, diagnostic=True)
    journal.append("env", vars={"NCCL_DEBUG": "INFO"})
    state = journal.replay()
    assert state.diagnostic_env == {} and state.extra_env["NCCL_DEBUG"] == "INFO"
