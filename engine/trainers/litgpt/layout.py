"""litgpt's checkpoint layout: ``out_dir/step-XXXXXXXX/lit_model.pth`` (XXXXXXXX = optimizer
``step_count``) plus side files, and ``out_dir/final/`` at the end of a run.

``--resume auto`` takes the highest ``out_dir.rglob("step-*/*.pth")``: it recurses and checks
nothing, which is why the engine's temporaries never have that shape (engine/checkpoints/store.py).

The save order the announcement check relies on: litgpt 0.5.13 ``pretrain.save_checkpoint`` makes
the folder, prints ``Saving checkpoint to '<out_dir>/step-XXXXXXXX/lit_model.pth'`` (or ``final/``),
and only then writes files: ``fabric.save`` (Lightning ``_atomic_save``: the whole file goes to a
``tempfile.mkstemp()`` file in TMPDIR and is moved onto lit_model.pth at commit), then
hyperparameters.yaml, the tokenizer files, model_config.yaml.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from engine.trainers.litgpt.pth_scan import scan_pth
from engine.trainers.litgpt import log_lines

PTH_NAME = "lit_model.pth"
REQUIRED_SIDE_FILES = ("model_config.yaml", "hyperparameters.yaml")
STEP_DIR_RE = re.compile(r"^step-(\d+)$")
STEP_IN_PATH = re.compile(r"step-(\d+)")
# Every file litgpt 0.5.13's save_checkpoint puts in a step-*/final folder (fabric.save,
# save_hyperparameters, copy_config_files, save_config).
CHECKPOINT_FILES = frozenset({PTH_NAME, "hyperparameters.yaml", "model_config.yaml", "config.json",
                              "generation_config.json", "tokenizer.json", "tokenizer.model", "tokenizer_config.json"})


def is_zip(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path):  # central directory only: cheap, catches truncation
            return True
    except (zipfile.BadZipFile, EOFError, OSError):
        return False


class LitGPTLayout:
    final_name = "final"
    checkpoint_files = CHECKPOINT_FILES
    # A SIGTERM right after "Saving checkpoint to" leaves a complete .pth without its yaml files.
    required_files = REQUIRED_SIDE_FILES
    trainer_folders = frozenset({"logs"})  # choose_logger: <out_dir>/logs/csv/version_N/ (never deleted)

    def step_of(self, folder_name: str) -> int | None:
        m = STEP_DIR_RE.match(folder_name)
        return int(m.group(1)) if m else None

    def folder_name(self, step: int) -> str:
        return f"step-{step:08d}"

    def resume_file(self, folder: Path) -> Path:
        return Path(folder) / PTH_NAME  # `--resume` needs the file: a folder gives IsADirectoryError

    def step_in_path(self, path: str) -> int | None:
        found = STEP_IN_PATH.findall(path)  # a rescaled copy (resume.py) keeps the step in its name
        return int(found[-1]) if found else None

    def scan(self, folder: Path, want_sha256: bool) -> tuple[str | None, dict[str, str]]:
        problem, digest = scan_pth(self.resume_file(folder), want_sha256=want_sha256)  # zip CRCs, no unpickling
        return problem, ({PTH_NAME: digest} if digest else {})

    def looks_whole(self, folder: Path) -> bool:
        pth = self.resume_file(folder)
        return pth.is_file() and is_zip(pth)

    def announced_saves(self, log_text: bytes, out_dir: Path) -> set[str]:
        return log_lines.announced_saves(log_text, out_dir, PTH_NAME,
                                         lambda name: name == self.final_name or self.step_of(name) is not None)
