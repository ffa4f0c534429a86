"""`runbook replay incident-N --execute`: perform a recorded recovery again, for real, elsewhere.

A new project-local folder `runs/replay-incident-N-<UTC time>/` gets its own run config
(`configs/run_config.yaml`, so relative paths resolve inside it), a verified copy of the checkpoint
the incident resumed from, and then `runbook watch` runs on it in-process. The original run folder,
out_dir and config are only read.

What comes from the record is data, used only as values: the step to resume from (looked up in
today's out_dir, never at a path the record names) and the hyperparameters of `config_after`.
Everything that could run something (trainer env/extra, playbook paths, data paths) comes from
today's config.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from runbook.exit_codes import ExitCode

if TYPE_CHECKING:
    from engine.checkpoints.layout import CheckpointLayout
    from engine.checkpoints.store import Checkpoint
    from engine.core.config import LoadedConfig

err = Console(stderr=True, highlight=False, soft_wrap=True)

# Taken from record["config_after"]: what a recovery may change, and the model shape the checkpoint has.
HYPERPARAMETERS = ("micro_batch_size", "batch_size", "lr", "save_interval", "keep_last_k", "seed", "max_tokens")


class ExecuteRefused(Exception):
    def __init__(self, code: ExitCode, message: str):
        self.code = code
        super().__init__(message)


def replay_folder(loaded: LoadedConfig, incident_id: str, now: dt.datetime) -> Path:
    parent = loaded.project_dir / "runs"
    if any(parent.resolve().is_relative_to(d) for d in (loaded.run_dir, loaded.out_dir)):
        parent = loaded.project_dir / "replays"  # runs/ IS (inside) the original run: stay out of it
    base = parent / f"replay-{incident_id}-{now.strftime('%Y%m%dT%H%M%SZ')}"
    folder, n = base, 1
    while folder.exists():
        folder, n = base.with_name(f"{base.name}-{n}"), n + 1
    return folder


def checkpoint_step(record: dict, layout: CheckpointLayout) -> int | None:
    """The step the recovery resumed from (0: from scratch), else the newest verified one then."""
    step = record.get("resumed_step")
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return step
    resumed_from = record.get("resumed_from")
    if isinstance(resumed_from, str) and (found := layout.step_of(Path(resumed_from).parent.name)) is not None:
        return found
    snapshot = v if isinstance(v := record.get("snapshot"), dict) else {}
    newest = (snapshot.get("checkpoints") or {}).get("newest_verified_step")
    return newest if isinstance(newest, int) and not isinstance(newest, bool) and newest >= 0 else None


def source_checkpoint(record: dict, out_dir: Path, layout: CheckpointLayout) -> Checkpoint | None:
    """The run's own verified checkpoint folder for the recorded step; None for "from scratch"."""
    from engine.checkpoints.manifest import verify_checkpoint
    from engine.checkpoints.store import Checkpoint

    step = checkpoint_step(record, layout)
    if step is None:
        raise ExecuteRefused(ExitCode.NOT_FOUND, f"{record['id']} names no checkpoint to resume from "
                             "(no resumed_step, resumed_from or newest verified step in its snapshot)")
    if step == 0 and not record.get("resumed_from"):
        return None
    ckpt = Checkpoint(out_dir / layout.folder_name(step), step, layout)
    if not ckpt.path.is_dir():
        raise ExecuteRefused(ExitCode.NOT_FOUND, f"the checkpoint {record['id']} resumed from (step {step}) is no "
                             f"longer in {out_dir} (pruned or quarantined?); nothing was created")
    verdict = verify_checkpoint(ckpt)
    if not verdict.ok:
        raise ExecuteRefused(ExitCode.NOT_FOUND, f"{ckpt.path} does not verify ({verdict.reason}); nothing was created")
    return ckpt


def replay_config(loaded: LoadedConfig, record: dict, playbook_paths: list[Path], shipped: bool | None = None) -> dict:
    """Today's config with the recorded hyperparameters, every outside path absolute, and out_dir,
    run_dir and run_log inside the replay folder (relative: they resolve against it)."""
    from pydantic import ValidationError

    tree = loaded.config.model_dump(mode="json")
    after = v if isinstance(v := record.get("config_after"), dict) else {}
    for key in HYPERPARAMETERS:
        if key in after:
            tree[key] = after[key]
    if isinstance(after.get("model"), dict):
        tree["model"] = after["model"]
    tree.update(out_dir="checkpoints", run_dir="run", run_log="run-log.md", data_hash=loaded.config.data_hash)
    tree["data"] = {**tree["data"], "make_default": False,
                    **{name: str(loaded.data_path(name)) for name in ("train_dir", "val_dir", "tokenizer_dir")}}
    tree["playbooks"] = {"paths": [str(p) for p in playbook_paths],
                         "shipped": loaded.config.playbooks.shipped if shipped is None else shipped}
    if loaded.config.run_log_template:
        tree["run_log_template"] = str(loaded.resolve(loaded.config.run_log_template))
    tree["watch"] = {**tree["watch"], "quarantine_dir": None}
    try:
        type(loaded.config).model_validate(tree)   # by today's trainer's settings model
    except ValidationError as error:
        first = error.errors()[0]
        raise ExecuteRefused(ExitCode.BAD_CONFIG, f"{record['id']}: config_after gives an invalid run config "
                             f"({'.'.join(map(str, first['loc']))}: {first['msg']}); nothing was created") from None
    return tree


def prepare_replay_run(record: dict, loaded: LoadedConfig, playbook_paths: list[Path], now: dt.datetime | None = None,
                       shipped: bool | None = None) -> Path:
    """Make the replay folder (config + checkpoint copy); return its run config path."""
    from engine.checkpoints import store as ckpts
    from engine.checkpoints.manifest import seal_checkpoint, verify_checkpoint
    from engine.records.incident_store import ID_PATTERN
    from engine.trainers import adapter_for
    from engine.core.durable import atomic_write_text
    from engine.watch.scratch_runs import own_trainer_config
    from engine.core.yaml_source import round_trip_yaml

    incident_id = str(record.get("id"))
    if not ID_PATTERN.match(incident_id):
        raise ExecuteRefused(ExitCode.NOT_FOUND, f"'{incident_id}' is not an incident id")
    tree = replay_config(loaded, record, playbook_paths, shipped)          # refuse before creating anything
    adapter = adapter_for(loaded.config.trainer.kind)
    source = source_checkpoint(record, loaded.out_dir, adapter.layout)
    now = now or dt.datetime.now(dt.timezone.utc)
    folder = replay_folder(loaded, incident_id, now)
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.mkdir()  # raises if a concurrent replay took the name: then the folder is not ours to clean
    relocated = 0
    try:
        config_path = folder / "configs" / "run_config.yaml"
        config_path.parent.mkdir()
        out_dir = folder / "checkpoints"
        out_dir.mkdir()
        if source is not None:
            # Copy under a temp name, then rename: a half copy never looks like a checkpoint.
            tmp = out_dir / f"{ckpts.OWN_TMP_PREFIX}copy-{source.path.name}"
            shutil.copytree(source.path, tmp)
            copy = ckpts.Checkpoint(out_dir / source.path.name, source.step, adapter.layout)
            tmp.rename(copy.path)
            verdict = verify_checkpoint(copy)
            if not verdict.ok:
                raise ExecuteRefused(ExitCode.NOT_FOUND, f"the copy of {source.path} does not verify ({verdict.reason})")
            # The trainer may record paths under the run folder (litgpt: its data cache); the replay has its own.
            relocated = adapter.relocate_run_dir(copy, loaded.run_dir, folder / "run")
            if relocated:
                (copy.path / ckpts.MANIFEST_NAME).unlink(missing_ok=True)  # the copy's bytes changed: seal anew
                if not (verdict := seal_checkpoint(copy)).ok:
                    raise ExecuteRefused(ExitCode.NOT_FOUND, f"the relocated copy does not verify ({verdict.reason})")
        adapter.share_run_data(loaded.run_dir, folder / "run")   # its tokenized data, linked, not made again
        header = (f"# Replay of {incident_id} from {loaded.path}, made {now.isoformat(timespec='seconds')}.\n"
                  f"# Hyperparameters from the record's config_after; out_dir/run_dir/run_log inside this folder.\n")
        tree = own_trainer_config(tree, loaded, folder)   # a litgpt YAML the run is based on: copied, not shared
        buffer = io.StringIO()
        round_trip_yaml().dump(tree, buffer)
        atomic_write_text(config_path, header + buffer.getvalue())
        origin = {"incident": incident_id, "source_config": str(loaded.path), "source_run_dir": str(loaded.run_dir),
                  "checkpoint": str(source.path) if source else None, "step": source.step if source else 0,
                  "loader_paths_relocated": relocated,
                  "created": now.isoformat(timespec="seconds")}
        atomic_write_text(folder / "replay-origin.json", json.dumps(origin, indent=2) + "\n")
    except BaseException as error:
        shutil.rmtree(folder, ignore_errors=True)  # ours, just made: leave no half-prepared replay behind
        if isinstance(error, OSError):
            raise ExecuteRefused(ExitCode.BAD_CONFIG, f"could not prepare {folder}: {error}") from None
        raise
    return config_path


def execute_replay(record: dict, loaded: LoadedConfig, playbook_paths: list[Path], accept_data_change: bool = False,
                   shipped: bool | None = None) -> ExitCode:
    """Prepare the replay folder and run `runbook watch` on it in-process; its exit code is ours."""
    from runbook.watch_command import run_watch

    try:
        config_path = prepare_replay_run(record, loaded, playbook_paths, shipped=shipped)
    except ExecuteRefused as refused:
        err.print(Text(f"error: {refused}"))
        return refused.code
    folder = config_path.parent.parent
    err.print(Text(f"executing the recovery of {record['id']} again in {folder} "
                   f"(the original run in {loaded.run_dir} is not touched)"))
    code = run_watch(config_path, accept_data_change=accept_data_change)
    err.print(Text(f"replayed run finished with exit code {int(code)} ({code.name}); see {folder}"))
    return code
