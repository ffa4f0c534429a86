"""`runbook drill FAULT [CONFIG]`: break a scratch copy of the configured run on purpose and report the recovery."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console

from runbook.config_arg import chosen_config, config_argument, config_option
from runbook.exit_codes import ExitCode

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig
    from engine.watch.faults import Fault

out = Console(highlight=False, soft_wrap=True)

# A short run is enough to prove a recovery: 40 optimizer steps, a checkpoint every 10.
DRILL_RUN = {"max_tokens": 40960, "save_interval": 10, "keep_last_k": 10}


def make_scratch_project(loaded: LoadedConfig, fault: Fault, root: Path) -> Path:
    """A new project folder whose config trains on the same data with the fault's settings.

    Only the scratch folder is written: the original run, its checkpoints and its config stay untouched.
    """
    from engine.core.merge import deep_merge
    from engine.watch.faults import config_for
    from engine.watch.scratch_runs import own_trainer_config
    from engine.core.yaml_source import round_trip_yaml

    yaml = round_trip_yaml()
    tree = yaml.load(loaded.path.read_text())
    for key, value in DRILL_RUN.items():
        tree[key] = value
    tree["data_hash"] = ""
    for key in ("out_dir", "run_dir", "run_log"):
        tree.pop(key, None)  # defaults, inside the scratch project
    tree.setdefault("data", {})
    for name in ("train_dir", "val_dir", "tokenizer_dir"):
        tree["data"][name] = str(loaded.data_path(name))
    tree["data"]["make_default"] = False
    tree.setdefault("playbooks", {})["paths"] = [str(p) for p in loaded.playbook_paths]
    tree.setdefault("notifications", {}).setdefault("slack", {})["enabled"] = False
    tree = deep_merge(tree, config_for(fault.config, type(loaded.config.trainer)))   # only keys its trainer has
    tree = own_trainer_config(tree, loaded, root)   # a litgpt YAML the run is based on: copied, not shared
    config = root / "configs" / "run_config.yaml"
    config.parent.mkdir(parents=True)
    with open(config, "w") as fh:
        yaml.dump(tree, fh)
    from engine.trainers.run_config import load_config
    from engine.trainers import adapter_for

    scratch = load_config(config)   # the run's tokenized data, linked: a drill never re-tokenizes a dataset
    adapter_for(scratch.config.trainer.kind).share_run_data(loaded.run_dir, scratch.run_dir)
    return config


def drill(
    fault_name: str = typer.Argument(..., metavar="FAULT", help="preemption, hang, corrupt-checkpoint, oom, nan, loss-spike, slow"),
    config: Optional[Path] = config_argument("the run config to copy (it is never modified), default configs/run_config.yaml"),
    config_opt: Optional[Path] = config_option(),
    timeout: float = typer.Option(600.0, help="give up after this many seconds"),
) -> None:
    """Run the field manual's "break it on purpose" exercise on a scratch copy and report what runbook did."""
    from engine.watch.faults import FAULTS, DrillRun
    from engine.trainers import adapter_for
    from engine.trainers.run_config import load_config
    from runbook.watch_command import prepare_data

    if fault_name not in FAULTS:
        out.print(f"error: unknown fault '{fault_name}'; known: {', '.join(FAULTS)}")
        raise typer.Exit(int(ExitCode.USAGE))
    fault = FAULTS[fault_name]
    loaded = load_config(chosen_config(config, config_opt))
    try:  # the default corpus must exist before the scratch copy points at it
        prepare_data(loaded, accept_data_change=False, record_hash=False)
    except Exception as error:  # noqa: BLE001 - one sentence, same as `watch`
        out.print(f"error: {error}")
        raise typer.Exit(int(ExitCode.BAD_CONFIG)) from None
    root = loaded.run_dir.parent / "drills" / f"{fault.name}-{time.strftime('%Y%m%dT%H%M%S')}"
    scratch_config = make_scratch_project(loaded, fault, root)
    out.print(f"drill {fault.name}: {fault.description}\nscratch run: {root}")

    log = open(root / "watch.log", "wb")
    started = time.time()
    watcher = subprocess.Popen([sys.executable, "-m", "runbook.cli", "watch", str(scratch_config)],
                               stdout=log, stderr=subprocess.STDOUT, cwd=root)
    scratch = load_config(scratch_config)
    injected_at = None
    try:
        if fault.inject is not None:
            adapter = adapter_for(scratch.config.trainer.kind)
            injected_at = fault.inject(DrillRun(scratch.out_dir, scratch.run_dir, watcher, adapter, timeout))
        code = watcher.wait(timeout=max(1.0, timeout - (time.time() - started)))
    except (subprocess.TimeoutExpired, TimeoutError, RuntimeError) as error:
        watcher.terminate()
        watcher.wait(timeout=60)
        out.print(f"drill failed: {error} (see {root / 'watch.log'})")
        if said := last_line(root / "watch.log"):
            out.print(f"  the watcher's last line: {said}")
        raise typer.Exit(int(ExitCode.ESCALATED)) from None
    report = summarize(scratch, fault, code, injected_at or started, time.time() - started)
    (root / "drill-report.json").write_text(json.dumps(report, indent=2))
    for key, value in report.items():
        out.print(f"  {key}: {value}")
    raise typer.Exit(0 if report["recovered"] else int(ExitCode.ESCALATED))


def last_line(path: Path, tail: int = 4096) -> str:
    """The last non-empty line of a log (its last `tail` bytes read), or ""."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - tail))
            lines = [line.strip() for line in fh.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def summarize(scratch: LoadedConfig, fault: Fault, exit_code: int, injected_at: float, wall_s: float) -> dict:
    from engine.records.incident_store import IncidentStore
    from engine.checkpoints.store import final_exists
    from engine.trainers import adapter_for

    incidents = [i.to_json() for i in IncidentStore(scratch.run_dir).read_all()[0]]
    answered = [i for i in incidents if i["playbook"] in fault.expected_playbooks]
    first = answered[0] if answered else None
    completed = exit_code == 0 and final_exists(scratch.out_dir, adapter_for(scratch.config.trainer.kind).layout)
    return {
        "fault": fault.name,
        "recovered": bool(completed and first and first["outcome"] == "recovered"),
        "completed": completed,
        "watch_exit_code": exit_code,
        "incidents": [f"{i['id']} {i['playbook']} {i['outcome']}" for i in incidents],
        "detection_s": round(first["detected_at"] - injected_at, 2) if first else None,
        "recovery_s": first.get("recovery_seconds") if first else None,
        "steps_lost": first.get("steps_lost") if first else None,
        "wall_s": round(wall_s, 1),
    }
