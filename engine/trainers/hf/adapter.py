"""A Hugging Face Trainer script as a supervised trainer (kind `hf-trainer`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast
import importlib.util
from pathlib import Path

from engine.observe.events import Event
from engine.trainers.base import PLAYBOOK_METRICS, LaunchSpec, ProgressMeaning, ResumePlan, optimizer_step_meaning
from engine.trainers.hf import parse_check
from engine.trainers.hf.launch import LOGGING_STEPS, hf_argv, launcher_of
from engine.trainers.preflight import where
from engine.trainers.hf.layout import hf_layout
from engine.trainers.hf.settings import HFTrainerSettings
from engine.trainers.script import launch, lines, template, weights

if TYPE_CHECKING:
    from engine.checkpoints.store import Checkpoint
    from engine.core.config import LoadedConfig, RunConfig


def settings_of(config: RunConfig) -> HFTrainerSettings:
    """`trainer:` as HFTrainerSettings validated it (an hf-trainer run config is run_config_type(HFTrainerSettings))."""
    return cast(HFTrainerSettings, config.trainer)


class HFTrainerAdapter:
    name = "hf-trainer"
    settings_model = HFTrainerSettings
    metrics_provided = PLAYBOOK_METRICS   # the callback prints HF's logged grad_norm and learning_rate too
    install_hint = "pip install '.[hf]' from runbook's checkout, or 'runbook-pretrain[hf]' (transformers, accelerate, safetensors)"
    checks = "data folders, the Trainer script with its own argument parser on runbook's flags, and out_dir"   # what `runbook check` says it checked
    contract_hint = ("add runbook.hf_callback.RunbookCallback() to the Trainer's callbacks and end with "
                     "sys.exit(RunbookCallback.finish(trainer)) (docs/trainers.md)")   # said when a launch prints nothing runbook reads

    def __init__(self) -> None:
        self.layout = hf_layout()

    def is_installed(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in ("transformers", "accelerate", "safetensors"))

    def check_environment(self, loaded: LoadedConfig) -> list[str]:
        script = loaded.resolve(settings_of(loaded.config).script)
        if not script.is_file():
            return [f"{where(loaded, ('trainer', 'script'))}: trainer.script: no file {script}; name your Trainer script "
                    f"(relative to {loaded.project_dir})"]
        if not loaded.config.trainer.preflight_parse:
            return []
        # The user's own parser on the argv a fresh launch gets: what it parses is what the trainer trains with.
        values, argv = self._argv(loaded, None)
        result = parse_check.probe(argv, loaded.project_dir, launch.trainer_env(loaded))
        if "error" in result:
            return [f"{where(loaded, ('trainer', 'args'))}: trainer.script {script.name}: {result['error']}"]
        return [f"{where(loaded, ('trainer', 'args'))}: {script.name}'s own parser: {problem}"
                for problem in parse_check.compare(result["parsed"], values)]

    def data_fingerprint(self, loaded: LoadedConfig) -> str | None:
        return None   # the script reads data.train_dir (RUNBOOK_TRAIN_DIR): runbook's own hash applies

    def prepare_launch(self, loaded: LoadedConfig, launch_dir: Path, resume_from: Path | None, data_hash: str) -> LaunchSpec:
        _, argv = self._argv(loaded, resume_from)
        return launch.launch_spec(loaded, launch_dir, resume_from, argv)

    @staticmethod
    def _argv(loaded: LoadedConfig, resume_from: Path | None) -> tuple[dict, list[str]]:
        """The template values and the argv of one launch (the preflight's parse probe uses the same)."""
        s = settings_of(loaded.config)
        head = launcher_of(s.launcher, s.devices * s.num_nodes, "{python}")
        values = template.values_of(loaded, str(resume_from) if resume_from else None, head)
        # HF resumes from the checkpoint's folder; runbook hands the folder's resume file (model.safetensors).
        folder = Path(resume_from).parent if resume_from else None
        argv = hf_argv(loaded.resolve(s.script), values, [template.render(a, values) for a in s.args], folder,
                       [template.render(a, values) for a in head])
        return values, argv

    def progress_meaning(self, config: RunConfig) -> ProgressMeaning:
        """The callback's line is per logged step (logging_steps, runbook's flag): global_step counts optimizer
        steps, each micro x gradient_accumulation_steps x every rank's sequences."""
        s = settings_of(config)
        world = template.launcher_world(config, launcher_of(s.launcher, s.devices * s.num_nodes, "{python}"))
        return optimizer_step_meaning(config, world, LOGGING_STEPS)

    def parse_line(self, line: str) -> Event | None:
        return lines.parse(line, lambda folder: self.layout.resume_file(Path(folder)))

    def prepare_resume(self, checkpoint: Checkpoint, loaded: LoadedConfig, scratch_dir: Path) -> ResumePlan:
        # A smaller micro-batch needs no rewrite: HF counts optimizer steps (global_step) and skips
        # global_step x gradient_accumulation_steps batches of the new size, the same sequences.
        return ResumePlan(self.layout.resume_file(checkpoint.path), f"from step {checkpoint.step}")

    def find_nonfinite(self, checkpoint: Checkpoint, limit: int) -> list[str]:
        found: list[str] = []
        for path in self.layout.weight_files(checkpoint.path):   # a sharded save: every shard
            found += weights.nonfinite_names(path, None, limit - len(found))
            if len(found) >= limit:
                break
        return found

    def relocate_run_dir(self, checkpoint: Checkpoint, old_run_dir: Path, new_run_dir: Path) -> int:
        return 0   # HF records output_dir in training_args.bin, which a resume does not use

    def share_run_data(self, source_run_dir: Path, scratch_run_dir: Path) -> list[Path]:
        return []
