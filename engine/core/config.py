"""The run config (`configs/run_config.yaml`): schema, loading with file:line errors, write-back.

Relative paths resolve against the *project folder*: the folder that holds the config's folder
(`configs/run_config.yaml` -> the folder above `configs/`). Never against the current directory, so
`runbook watch` behaves the same wherever it is started from.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from pathlib import Path
from functools import cache
from typing import Any, ClassVar, Literal, Protocol

from pydantic import (Field, ValidationError, ValidationInfo, create_model, field_validator,
                      model_validator)

from engine.core.config_paths import file_problems, run_folder_problems
from engine.core.durable import atomic_write_text
from engine.core.env_names import check_env
from engine.core.known_secrets import secret_values
from engine.core.notifier import NotificationSettings
from engine.core.run_folder import RunFolder
from engine.core.text_safety import remember_secrets
from engine.core.settings import PlaybookSettings, SlurmSettings, Strict, UpkeepSettings, WatchSettings  # noqa: F401 - importable here too
from engine.core.yaml_source import (
    SourceError, describe_validation_error, load_yaml, locate, plain, round_trip_yaml, update_yaml_values,
)

# The kind a config without `trainer.kind` gets; engine/trainers/registry.py says which trainer that is
# (the core names none) and engine/trainers/run_config.py writes that trainer's name in at load.
DEFAULT_TRAINER_KIND = "default"


class ModelSection(Strict):
    """`model:` as the core reads it: the tokens of one sequence (an optimizer step is batch_size x
    block_size tokens). A trainer whose config describes the model declares a subclass with its
    other keys (TrainerSettings.model_section)."""

    block_size: int = Field(64, gt=0, description="tokens per sequence (the context length)")


class DataSettings(Strict):
    # text-files: runbook owns the data (folders of .txt: hashed, scanned, tokenized into its cache).
    # data-module: the trainer's own data module as the trainer's config names it (a custom class);
    # runbook passes it through unchanged, fingerprints its arguments and files, scans nothing.
    kind: Literal["text-files", "data-module"] = Field(
        "text-files", description="text-files (train_dir/val_dir of .txt) or data-module (the trainer's own data "
        "module, named in the trainer's config)")
    train_dir: Path = Path("data/stdlib/train")
    val_dir: Path = Path("data/stdlib/val")
    tokenizer_dir: Path = Path("data/tokenizer")
    # Make the embedded default corpus and tokenizer when the folders are empty (first run).
    make_default: bool = True


class TrainerSettings(Strict):
    """`trainer:` as every trainer has it. Each adapter supplies a subclass, its settings model, with
    its own keys (engine/trainers/registry.py finds it by kind); the run config of that kind is
    validated by it (run_config_type). The hooks below let a trainer's own config file own values;
    by default the run config owns them all."""

    # The `model:` section's model for this trainer (a ModelSection subclass).
    model_section: ClassVar[type[ModelSection]] = ModelSection

    kind: str = Field(DEFAULT_TRAINER_KIND, description="a registered trainer or python:<module>:<adapter class>; "
                      "default: runbook's default trainer (docs/trainers.md)")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    num_workers: int = Field(0, ge=0, description="data loader worker processes")
    devices: int = Field(1, gt=0, description="GPUs on this node used by the trainer")
    num_nodes: int = Field(1, gt=0, description="nodes, one torchrun agent each (c10d rendezvous); devices is per node (docs/nodes.md)")
    memory_limit_mb: int | None = Field(None, gt=0, description="address-space limit of the trainer process (RLIMIT_AS)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for the trainer")
    extra: dict[str, Any] = Field(default_factory=dict, description="merged into the generated trainer config")
    preflight_parse: bool = Field(True, description="before a launch, have the trainer's own parser read the generated "
                                  "config and size a checkpoint (a subprocess of seconds; `runbook check` always does it)")
    notice_signals: list[str] = Field(["SIGTERM", "SIGUSR1"], description="signals on which the trainer finishes its optimizer "
                                      "step, saves a checkpoint and exits with SAVED_ON_NOTICE (75); the watcher sends the "
                                      "first on its own SIGTERM; [] = die at once, as most trainers do by themselves")
    warm_spare: bool = Field(False, description="keep a spare trainer interpreter with the trainer's modules imported, "
                             "which becomes the next launch (a relaunch skips the imports); costs an idle process")

    @field_validator("env")
    @classmethod
    def _env_names(cls, variables: dict[str, str]) -> dict[str, str]:
        return check_env(variables)   # POSIX names, no NUL in values (engine/core/env_names.py)

    @field_validator("notice_signals")
    @classmethod
    def _notice_signals(cls, names: list[str]) -> list[str]:
        allowed = ("SIGTERM", "SIGUSR1", "SIGINT", "SIGHUP")   # SIGUSR2 is runbook's stop without a save
        wrong = [n for n in names if n not in allowed]
        if wrong:
            raise ValueError(f"notice_signals {wrong} not allowed; choose among {list(allowed)}")
        return names

    @field_validator("kind")
    @classmethod
    def _known_trainer(cls, kind: str, info: ValidationInfo) -> str:
        seam = (info.context or {}).get("seam")
        if seam is not None:
            seam.check_kind(kind)   # a ValueError says why there is no such trainer (with file:line, below)
        return kind

    # --- hooks for a trainer whose own config file owns some values (a YAML of its own) ---
    @classmethod
    def overlay(cls, values: dict, config_path: Path) -> dict:
        """The raw run config values with what the trainer's own config file owns laid over them
        (before validation; raise SourceError with file:line for what is wrong there)."""
        return values

    def write_owned(self, loaded: "LoadedConfig", updates: dict) -> dict:
        """Write the updates the trainer's own config file owns there; return the rest."""
        return updates

    def source_line(self, loaded: "LoadedConfig", loc: tuple) -> str | None:
        """`file:line:col` where the trainer's own config file sets this key, or None."""
        return None

    def write_data_dirs(self, loaded: "LoadedConfig", values: dict) -> bool:
        """Write data folders where the trainer's own config keeps them; False when the run config does."""
        return False

    def detach(self, tree: dict, loaded: "LoadedConfig", folder: Path) -> dict:
        """`tree` (a scratch run's config: a drill, a replay) with the trainer's own config file copied
        into `folder` and pointed at, so the scratch run never writes into the user's files."""
        return tree


class RunConfig(Strict):
    # The seed's preventive config, all honoured.
    micro_batch_size: int = Field(4, gt=0)
    batch_size: int = Field(16, gt=0, description="global (effective) batch in sequences")
    lr: float = Field(3e-3, gt=0)
    save_interval: int = Field(20, gt=0, description="optimizer steps between checkpoints")
    keep_last_k: int = Field(3, gt=0)
    seed: int = 1337
    data_hash: str = Field("", description="sha256 of the training data; filled in by runbook when empty")
    max_tokens: int = Field(102_400, gt=0, description="run length in tokens")
    out_dir: Path = Path("checkpoints/pretrain")
    run_log: Path = Path("docs/run-log.md")
    run_log_template: Path | None = Field(None, description="Jinja2 template of one run-log entry (default: built in)")
    run_dir: Path = Field(Path("runs/pretrain"), description="journal, incidents, trainer logs, quarantine")

    model: ModelSection = Field(default_factory=ModelSection)
    data: DataSettings = Field(default_factory=DataSettings)
    trainer: TrainerSettings = Field(default_factory=TrainerSettings)
    playbooks: PlaybookSettings = Field(default_factory=PlaybookSettings)
    watch: WatchSettings = Field(default_factory=WatchSettings)
    notifications: NotificationSettings = Field(default_factory=NotificationSettings)
    upkeep: UpkeepSettings = Field(default_factory=UpkeepSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings, description="`runbook slurm submit` and the watcher inside a SLURM job")

    @model_validator(mode="after")
    def _batch_divides(self) -> "RunConfig":
        if self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of micro_batch_size ({self.micro_batch_size})"
            )
        per_step = self.batch_size * self.model.block_size
        if self.max_tokens < per_step:
            raise ValueError(f"max_tokens ({self.max_tokens}) is less than one optimizer step "
                             f"(batch_size x model.block_size = {per_step} tokens): the run would plan 0 steps")
        return self


@cache
def run_config_type(settings: type[TrainerSettings]) -> type[RunConfig]:
    """PURE. The run config of one trainer: `trainer:` validated by its settings model and `model:` by
    the model section it declares (errors keep their place in the file: the keys do not move)."""
    if settings is TrainerSettings and settings.model_section is ModelSection:
        return RunConfig
    return create_model(f"RunConfig[{settings.__name__}]", __base__=RunConfig, __module__=settings.__module__,
                        trainer=(settings, Field(default_factory=settings)),
                        model=(settings.model_section, Field(default_factory=settings.model_section)))


class TrainerConfigSeam(Protocol):
    """What the trainer side adds to a run config (engine/trainers/run_config.py provides it): the
    config itself knows no trainer, so this floor imports none."""

    def check_kind(self, kind: str) -> None:
        """Raise ValueError when no adapter has this trainer.kind."""

    def settings_model(self, kind: str) -> type[TrainerSettings]:
        """The settings model of the trainer of this kind; ValueError when there is none."""

    def overlay(self, values: dict, config_path: Path) -> dict:
        """The values with the default kind written in and what a trainer's own config file owns laid over them."""


class LoadedConfig:
    """A validated RunConfig plus where it came from, with every path made absolute."""

    def __init__(self, path: Path, config: RunConfig, seam: TrainerConfigSeam | None = None):
        self.path = path.resolve()
        self.project_dir = self.path.parent.parent
        self.config = config
        self.seam = seam

    def resolve(self, p: Path) -> Path:
        return p if p.is_absolute() else (self.project_dir / p).resolve()

    @property
    def out_dir(self) -> Path:
        return self.resolve(self.config.out_dir)

    @property
    def run_dir(self) -> Path:
        return self.resolve(self.config.run_dir)

    @property
    def run_log(self) -> Path:
        return self.resolve(self.config.run_log)

    @property
    def folder(self) -> RunFolder:
        return RunFolder(self.run_dir)

    @property
    def quarantine_dir(self) -> Path:
        q = self.config.watch.quarantine_dir
        return self.resolve(q) if q else self.run_dir / "quarantine"

    @property
    def playbook_paths(self) -> list[Path]:
        # The project's own playbooks/ folder is optional (the shipped set suffices); any other path must exist.
        return [self.resolve(p) for p in self.config.playbooks.paths
                if p != Path("playbooks") or self.resolve(p).exists()]

    def data_path(self, name: str) -> Path:
        return self.resolve(getattr(self.config.data, name))

    def reload(self) -> "LoadedConfig":
        return load_config(self.path, self.seam)

    def save_copy(self, dest: Path) -> None:
        """Write the config this process is using to `dest`: the user's file (comments kept) while it
        still says the same, else the in-memory values, marked as such (the file was edited since)."""
        try:
            on_disk = load_config(self.path, self.seam).config
        except (SourceError, OSError):
            on_disk = None
        if on_disk == self.config:
            shutil.copy2(self.path, dest)
            return
        buffer = io.StringIO()
        round_trip_yaml().dump(self.config.model_dump(mode="json"), buffer)
        header = (f"# The config this launch used. {self.path} was edited after runbook loaded it and\n"
                  "# says something else; runbook reads it again only when it writes a change back.\n")
        atomic_write_text(dest, header + buffer.getvalue())

    def write_back(self, updates: dict[str, Any]) -> "LoadedConfig":
        """Persist changed hyperparameters into the user's file (comments and order kept); with
        a trainer config file of the user's (TrainerSettings.write_owned), the keys that file owns go
        there (one source of truth)."""
        type(self.config).model_validate({**self.config.model_dump(), **updates})  # refuse invalid values first
        updates = self.config.trainer.write_owned(self, updates)
        if updates:
            update_yaml_values(self.path, updates)
        return self.reload()

    def write_data_dirs(self, values: dict[str, str]) -> "LoadedConfig":
        """Set data.<key> (train_dir, val_dir) where the user keeps it: the run config, or the trainer's
        own config file that owns the data paths; comments and order kept."""
        type(self.config).model_validate({**self.config.model_dump(), "data": {**self.config.data.model_dump(), **values}})
        if self.config.trainer.write_data_dirs(self, values):
            return self.reload()
        yaml = round_trip_yaml()
        tree = yaml.load(self.path.read_text(encoding="utf-8"))
        if tree.get("data") is None:
            tree["data"] = {}
        for key, value in values.items():
            tree["data"][key] = value
        buffer = io.StringIO()
        yaml.dump(tree, buffer)
        atomic_write_text(self.path, buffer.getvalue())
        return self.reload()


def load_config(path: Path, seam: TrainerConfigSeam | None = None) -> LoadedConfig:
    """The run config at `path`, validated, with file:line errors. Callers load it through
    engine.trainers.run_config.load_config, which passes the trainers' seam (kind check, overlays)."""
    path = Path(path)
    tree = load_yaml(path)
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise SourceError([f"{path}:1:1: the run config must be a mapping of keys to values"])
    values = plain(tree)
    model = RunConfig
    if seam is not None:
        values = seam.overlay(values, path)
        trainer = values.get("trainer")
        kind = trainer.get("kind", DEFAULT_TRAINER_KIND) if isinstance(trainer, dict) else None
        if isinstance(kind, str):   # else pydantic says what trainer and its kind must be
            try:
                model = run_config_type(seam.settings_model(kind))
            except ValueError as err:   # no such trainer: that alone, not every key its model would know
                where = locate(tree, ("trainer", "kind"))
                position = f"{path}:{where[0]}:{where[1]}" if where else str(path)
                raise SourceError([f"{position}: trainer.kind: {err}"]) from None
    try:
        config = model.model_validate(values, context={"seam": seam})
    except ValidationError as err:
        raise SourceError(describe_validation_error(path, tree, err)) from None
    loaded = LoadedConfig(path, config, seam)
    if problems := run_folder_problems(path, tree, loaded) or file_problems(path, tree, loaded):   # config_paths.py
        raise SourceError(problems)
    # From here on every text this process redacts also hides these values (engine/core/text_safety.py).
    remember_secrets(secret_values(config.trainer.env, os.environ, config.notifications.secret_env_names()))
    return loaded


def compute_data_hash(train_dir: Path, val_dir: Path) -> str:
    """sha256 over the names and bytes of every .txt file the trainer reads, in a fixed order."""
    digest = hashlib.sha256()
    for base, files in (("train", sorted(train_dir.glob("*.txt"))), ("val", sorted(val_dir.glob("*.txt")))):
        for path in files:
            digest.update(f"{base}/{path.name}\0".encode())
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
            digest.update(b"\0")
    return "sha256:" + digest.hexdigest()
