"""The litgpt contract, hyperparameters.yaml: runbook's trainer parses litgpt's CLI once per process
(engine/trainers/litgpt/hyperparameters.py) instead of at each save, so every checkpoint of the reference run must
hold exactly the file litgpt's own save_hyperparameters writes for the launch's argv, computed here in a fresh
interpreter with litgpt's unpatched function."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

LITGPT_OWN = """
import sys
from pathlib import Path
from engine.trainers.litgpt import lean_imports
pretrain = lean_imports.import_pretrain()
from litgpt.parser_config import save_hyperparameters
sys.argv = ["entry", "pretrain", "--config", sys.argv[1]]
save_hyperparameters(pretrain.setup, Path(sys.argv_out))
"""


def test_every_checkpoint_holds_the_hyperparameters_file_litgpt_itself_writes(litgpt_reference_run, tmp_path):
    project = litgpt_reference_run["project"]
    launches = sorted(project.run_dir.glob("launches/*/litgpt_pretrain.yaml"))
    assert len(launches) == 1, launches   # the undisturbed run: one launch
    script = LITGPT_OWN.replace("sys.argv_out", repr(str(tmp_path)))
    done = subprocess.run([sys.executable, "-c", script, str(launches[0])], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    litgpt_own = (tmp_path / "hyperparameters.yaml").read_bytes()
    assert b"max_tokens: 40960" in litgpt_own   # the launch's values, not defaults
    folders = sorted(p for p in project.out_dir.iterdir() if (p / "lit_model.pth").is_file() and not p.is_symlink())
    assert [p.name for p in folders] == ["final", *(f"step-{s:08d}" for s in (10, 20, 30, 40))]
    for folder in folders:
        assert (folder / "hyperparameters.yaml").read_bytes() == litgpt_own, folder
