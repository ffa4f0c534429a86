"""A plain training script as a supervised trainer (kind `script`): any `python train.py` (or torchrun)
that prints runbook/sdk.py's lines and takes resume, micro-batch and lr as templated arguments."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast
import shutil
from pathlib import Path

from engine.observe.events import Event
from engine.trainers.base import PLAYBOOK_METRICS, LaunchSpec, ProgressMeaning, ResumePlan, optimizer_step_meaning
from engine.trainers.preflight import where
from engine.trainers.script import launch, lines, template, weights
from engine.trainers.script.layout import FolderLayout
from engine.trainers.script.settings import ScriptSettings

if TYPE_CHECKING:
    from engine.checkpoints.store import Checkpoint
    from engine.core.config import LoadedConfig, RunConfig

# The contract (docs/trainers.md): each save is <out_dir>/step-<6 digits>/state.pt, announced first with
# runbook.sdk.saving(folder); the last is <out_dir>/final/state.pt.
CHECKPOINT_PREFIX, RESUME_FILE = "step-", "state.pt"


def script_index(argv: list[str]) -> int | None:
    """PURE. Where the command names its script: the first argument after the launcher ending in .py
    (`python train.py`, `torchrun --nproc-per-node 2 train.py`, `accelerate launch train.py`); None if none does."""
    return next((i for i, arg in enumerate(argv[1:], start=1) if arg.endswith(".py") and not arg.startswith("-")), None)


class ScriptAdapter:
    name = "script"
    settings_model = ScriptSettings
    metrics_provided = PLAYBOOK_METRICS   # sdk.progress takes grad_norm and lr
    install_hint = "the script's command (trainer.command) must name an executable on PATH or a file"
    checks = "data folders, the command's program and script, and out_dir"   # what `runbook check` says it checked
    contract_hint = ("call runbook.sdk: sdk.progress(step, loss) after each optimizer step and sdk.saving(folder) before each save "
                     "(docs/trainers.md, 'The lines runbook reads')")   # said when a launch prints nothing runbook reads

    def __init__(self) -> None:
        # Fixed, not configured: the engine reads checkpoints (status, verify, drills) before any config binds.
        self.layout = FolderLayout(CHECKPOINT_PREFIX, RESUME_FILE, 6, frozenset())
        self._settings: ScriptSettings | None = None

    def _bind(self, loaded: LoadedConfig) -> ScriptSettings:
        # a script run config is run_config_type(ScriptSettings): its `trainer:` is one
        settings = self._settings = cast(ScriptSettings, loaded.config.trainer)
        return settings

    def is_installed(self) -> bool:
        return True   # what is run is the user's command; check_environment says when it cannot start

    def check_environment(self, loaded: LoadedConfig) -> list[str]:
        s = self._bind(loaded)
        values = template.values_of(loaded, None)
        argv = [template.render(item, values) for item in s.command]
        problems = []
        if not (shutil.which(argv[0]) or Path(loaded.project_dir, argv[0]).is_file()):
            problems.append(f"{where(loaded, ('trainer', 'command', 0))}: trainer.command[0] is {argv[0]!r}: no such "
                            "executable on PATH or file; write the interpreter first (e.g. [\"{python}\", \"train.py\", ...])")
        at = script_index(argv)
        if at is not None and not (script := Path(loaded.project_dir, argv[at])).is_file():
            problems.append(f"{where(loaded, ('trainer', 'command', at))}: trainer.command[{at}] is {s.command[at]!r}: "
                            f"no file {script} (the command runs in {loaded.project_dir})")
        return problems

    def data_fingerprint(self, loaded: LoadedConfig) -> str | None:
        return None   # the script reads data.train_dir/val_dir: runbook's own hash applies

    def prepare_launch(self, loaded: LoadedConfig, launch_dir: Path, resume_from: Path | None, data_hash: str) -> LaunchSpec:
        s = self._bind(loaded)
        values = template.values_of(loaded, str(resume_from) if resume_from else None, s.command)
        return launch.launch_spec(loaded, launch_dir, resume_from, launch.argv_of(s.command, s.resume_args, values))

    def progress_meaning(self, config: RunConfig) -> ProgressMeaning:
        """sdk.progress is called per optimizer step and counts them: the global batch of the command's ranks
        (its launcher's flags, engine/trainers/script/world.py), timed since the previous call."""
        return optimizer_step_meaning(config, template.launcher_world(config, cast(ScriptSettings, config.trainer).command))

    def parse_line(self, line: str) -> Event | None:
        return lines.parse(line, lambda folder: self.layout.resume_file(Path(folder)))

    def prepare_resume(self, checkpoint: Checkpoint, loaded: LoadedConfig, scratch_dir: Path) -> ResumePlan:
        self._bind(loaded)
        return ResumePlan(self.layout.resume_file(checkpoint.path), f"from step {checkpoint.step}")

    def find_nonfinite(self, checkpoint: Checkpoint, limit: int) -> list[str]:
        path = self.layout.resume_file(checkpoint.path)
        key = self._settings.weights_key if self._settings else "model"
        return weights.nonfinite_names(path, key, limit) if path.is_file() else []

    def relocate_run_dir(self, checkpoint: Checkpoint, old_run_dir: Path, new_run_dir: Path) -> int:
        return 0   # the sdk's contract records no run-folder paths in a checkpoint

    def share_run_data(self, source_run_dir: Path, scratch_run_dir: Path) -> list[Path]:
        return []
