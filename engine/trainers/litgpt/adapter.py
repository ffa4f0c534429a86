"""litgpt `pretrain` as a supervised trainer: the adapter the engine talks to, made of this folder's parts."""

from __future__ import annotations

from typing import TYPE_CHECKING
from pathlib import Path

from engine.observe.events import Event
from engine.trainers.base import EVERY_TRAINER_METRICS, LaunchSpec, ProgressMeaning, ResumePlan, micro_batch_meaning
from engine.trainers.litgpt import data_cache, data_moves, launch, log_lines, preflight, resume, support
from engine.trainers.litgpt.layout import LitGPTLayout
from engine.trainers.litgpt import user_config
from engine.trainers.litgpt.settings import LitGPTSettings

if TYPE_CHECKING:
    from engine.checkpoints.store import Checkpoint
    from engine.core.config import LoadedConfig, RunConfig


class LitGPTAdapter:
    name = "litgpt"
    settings_model = LitGPTSettings   # also for adapters built on this one (registry.py)
    install_hint = launch.INSTALL_HINT
    checks = "data, tokenizer, litgpt's config parser, devices and out_dir"   # what `runbook check` says it checked
    metrics_provided = EVERY_TRAINER_METRICS   # pretrain's progress line prints neither grad norm nor lr

    def __init__(self) -> None:
        self.layout = LitGPTLayout()

    def is_installed(self) -> bool:
        return launch.is_installed()

    def progress_meaning(self, config: RunConfig) -> ProgressMeaning:
        """litgpt prints a line per optimizer step (log_interval 1 x the accumulation), but its `iter` counts
        micro-batches and its `iter time` is the last micro-batch's alone: one micro-batch on every rank."""
        return micro_batch_meaning(config)

    def check_environment(self, loaded: LoadedConfig) -> list[str]:
        if problem := support.version_problem(support.installed_version()):
            return [problem]   # the other checks ask litgpt itself, whose answers may differ in another version
        return preflight.problems(loaded)

    def data_fingerprint(self, loaded: LoadedConfig) -> str | None:
        if loaded.config.data.kind != "data-module":
            return None

        return user_config.data_module_hash(loaded)

    def prepare_launch(self, loaded: LoadedConfig, launch_dir: Path, resume_from: Path | None, data_hash: str) -> LaunchSpec:
        return launch.prepare_launch(loaded, launch_dir, resume_from, data_hash)

    def spare_spec(self, loaded: LoadedConfig) -> LaunchSpec | None:   # a warm spare's shape before the first launch (engine/watch/startup.py)
        return launch.spare_spec(loaded)

    def trainer_config(self, loaded: LoadedConfig, train_dir: Path, val_dir: Path, resume_from: Path | None) -> dict:
        return launch.trainer_config(loaded, train_dir, val_dir, resume_from)

    def parse_line(self, line: str) -> Event | None:
        return log_lines.parse_line(line)

    def prepare_resume(self, checkpoint: Checkpoint, loaded: LoadedConfig, scratch_dir: Path) -> ResumePlan:
        pth = self.layout.resume_file(checkpoint.path)
        plan = ResumePlan(pth, f"from step {checkpoint.step}")
        saved_mb = resume.checkpoint_micro_batch(checkpoint.path)
        new_mb = loaded.config.micro_batch_size
        if saved_mb is not None and saved_mb != new_mb:
            copy = Path(scratch_dir) / f"{self.layout.folder_name(checkpoint.step)}-mb{new_mb}.pth"
            # litgpt counts iter_num in micro-batches: rescale so tokens and the lr schedule stay exact.
            info = resume.rescaled_copy(pth, copy, saved_mb / new_mb)
            plan = ResumePlan(
                copy,
                f"from step {checkpoint.step} (iter_num rescaled for micro_batch_size {saved_mb} -> {new_mb})",
                f"resumed from a copy of step {checkpoint.step} with iter_num {info['iter_num_before']} -> "
                f"{info['iter_num_after']} (micro_batch_size {saved_mb} -> {new_mb}); the original checkpoint is untouched",
            )
        return data_moves.follow_data(plan, checkpoint, loaded, scratch_dir, self.layout.folder_name(checkpoint.step))

    def find_nonfinite(self, checkpoint: Checkpoint, limit: int) -> list[str]:
        pth = self.layout.resume_file(checkpoint.path)
        return resume.find_nonfinite_tensors(pth, limit=limit) if pth.is_file() else []

    def relocate_run_dir(self, checkpoint: Checkpoint, old_run_dir: Path, new_run_dir: Path) -> int:
        return resume.relocate_loader_state(self.layout.resume_file(checkpoint.path), old_run_dir, new_run_dir)

    def share_run_data(self, source_run_dir: Path, scratch_run_dir: Path) -> list[Path]:
        return data_cache.link_complete_caches(source_run_dir, scratch_run_dir)
