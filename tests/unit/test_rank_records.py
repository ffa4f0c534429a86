"""runbook's trainer side (runbook/rank_records.py, runbook/sdk.py): each rank's heartbeat and exit, written
from the launcher's environment inside a real interpreter started in a user's folder, read back with the
engine's own models (engine/process/ranks.py)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from engine.process.ranks import read_folder
from runbook.rank_records import identity_from
from tests.conftest import REPO

SCRIPT = """
import json
from runbook import sdk
sdk.progress(1, 2.5)
sdk.saving("out/step-000001")
{crash}
"""


def run_rank(folder: Path, crash: str, **env) -> subprocess.CompletedProcess:
    """A user's repository: an engine.py and an engine/ package of its own first on sys.path (DETR, MAE, DeiT)."""
    (folder / "engine.py").write_text("raise ImportError('the user engine.py was imported')\n")
    (folder / "engine").mkdir(exist_ok=True)
    (folder / "engine" / "__init__.py").write_text("raise ImportError('the user engine/ was imported')\n")
    (folder / "train.py").write_text(SCRIPT.format(crash=crash))
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "PYTHONPATH")}
    return subprocess.run([sys.executable, "train.py"], cwd=folder, capture_output=True, text=True, timeout=60,
                          env={**environ, "RUNBOOK_RANKS_DIR": str(folder / "ranks"), **env})


def test_a_rank_records_its_heartbeat_and_its_own_exception_with_the_users_file_and_line(tmp_path):
    done = run_rank(tmp_path, "raise ValueError('bad shape')", RANK="1", WORLD_SIZE="2", LOCAL_RANK="1")
    assert done.returncode == 1 and "ValueError: bad shape" in done.stderr
    assert "runbook: step" not in done.stdout and "runbook: saving" not in done.stdout   # rank 1 does not speak
    beats, exits = read_folder(tmp_path / "ranks")
    assert beats[1].world_size == 2 and beats[1].step == 1 and beats[1].pid > 0
    assert exits[1].exit_code == 1 and exits[1].error == "ValueError: bad shape"
    assert exits[1].where == "train.py:6"


def test_rank_zero_speaks_and_an_error_raised_in_a_library_is_not_called_the_users_code(tmp_path):
    done = run_rank(tmp_path, "json.loads('{')", RANK="0", WORLD_SIZE="2")
    assert "runbook: step 1 loss 2.500000" in done.stdout and "runbook: saving" in done.stdout
    _, exits = read_folder(tmp_path / "ranks")
    assert exits[0].error.startswith("JSONDecodeError") and exits[0].where is None


def test_a_clean_exit_is_recorded_as_exit_0_without_an_error(tmp_path):
    run_rank(tmp_path, "", RANK="1", WORLD_SIZE="2")
    _, exits = read_folder(tmp_path / "ranks")
    assert exits[1].exit_code == 0 and exits[1].error is None


def test_the_heartbeats_start_time_is_the_one_the_engine_proves_the_pid_by(tmp_path):
    import psutil

    from runbook.rank_records import process_start_time

    assert abs(process_start_time() - psutil.Process().create_time()) < 0.05


def test_the_rank_comes_from_any_launchers_environment():
    assert identity_from({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}) == identity_from(
        {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    srun = identity_from({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"})
    assert (srun.rank, srun.world_size, srun.local_rank) == (5, 6, 1)
    assert identity_from({}).world_size == 1


def test_the_trainer_side_imports_only_the_standard_library_torch_transformers_and_itself():
    allowed_runbook = {"runbook", "runbook.sdk", "runbook.rank_records"}
    for name in ("sdk.py", "rank_records.py", "hf_callback.py"):
        tree = ast.parse((REPO / "runbook" / name).read_text())
        for node in ast.walk(tree):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for module in modules:
                top = module.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("__future__", "transformers", "torch") \
                    or module in allowed_runbook, f"runbook/{name} imports {module}"
