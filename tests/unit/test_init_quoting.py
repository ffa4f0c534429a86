"""`runbook init --from-litgpt PATH` writes PATH as a quoted YAML string: a litgpt config named `true`,
`null`, `~`, `&a.yaml`, `#x`, `a: b` or `[x]` reads back as that very path (issue 34). Before the fix
it was written bare: `null` and `~` loaded as "no litgpt config" (init exited 0 and the user's config was
silently ignored), `true` became a bool, `&a.yaml` an anchor, `#x` a comment."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.trainers.run_config import load_config
from tests.conftest import RUNBOOK

NAMES = ["true", "null", "~", "&a.yaml", "#x", "a: b", "[x]", 'quote"and\\backslash', "no", "0x1F"]

LITGPT = """\
model_name: pythia-14m
out_dir: out/pretrain
data:
  class_path: litgpt.data.TextFiles
  init_args: {train_data_path: corpus/train, val_data_path: corpus/val}
tokenizer_dir: tokenizer
train: {save_interval: 5, global_batch_size: 16, micro_batch_size: 4, max_tokens: 10240, max_seq_length: 64}
optimizer: {class_path: torch.optim.AdamW, init_args: {lr: 0.0042}}
"""


@pytest.mark.parametrize("name", NAMES)
def test_init_writes_a_litgpt_config_path_that_reads_back_as_the_same_path(tmp_path, name):
    project = tmp_path / "proj"
    project.mkdir()
    (project / name).write_text(LITGPT)
    result = subprocess.run([RUNBOOK, "init", "--from-litgpt", f"./{name}", str(project)], capture_output=True,
                            text=True, timeout=120, cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    loaded = load_config(project / "configs" / "run_config.yaml")
    assert loaded.config.trainer.litgpt_config == Path(name)
    assert loaded.resolve(loaded.config.trainer.litgpt_config) == (project / name).resolve()
    assert loaded.config.lr == 0.0042   # the values come from that file, not from runbook's defaults
