"""`runbook scan-data`: find bad lines in the training text with the run's tokenizer; `--fix` cleans them.

`--fix` never edits or moves the user's text. It writes a complete cleaned copy of the data folder
as a new sibling (`data/stdlib/train` -> `data/stdlib/train-clean`) and points the run config's
`data.train_dir` (or `val_dir`) there, with the new `data_hash`. Why a new folder rather than a
cleaned file beside the original: the trainer reads every *.txt in the folder, so a copy beside the
original would train on both. Why not move the originals out: the folder the config names would
silently change content; with a new folder the config shows what the run trains on, the original
stays exactly where the user put it, and going back is one line in the config.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

from runbook.config_arg import chosen_config, config_option
from runbook.exit_codes import ExitCode

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from engine.core.config import LoadedConfig
    from engine.datascan.report import ScanReport

SHOWN_FINDINGS = 50
out = Console(highlight=False)


def scan_data(
    paths: Optional[list[Path]] = typer.Argument(None, metavar="CONFIG|PATHS", help="the run config (a .yaml/.yml "
                                                 "file), then text files or folders of *.txt (default: the run's data.train_dir)"),
    config: Optional[Path] = config_option("run config (YAML): tokenizer and data folders (same as CONFIG)"),
    max_tokens: int = typer.Option(100_000, "--max-tokens", min=1, help="flag lines with more tokens than this"),
    context_length: Optional[int] = typer.Option(None, "--context", min=1, help="also flag lines longer than the model context (tokens)"),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="tokenizer folder (default: the config's data.tokenizer_dir)"),
    fix: bool = typer.Option(False, "--fix", help="write cleaned data to <folder>-clean and point the run config at it"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Scan training text for bad lines: invalid UTF-8, control characters, lines over a token limit."""
    from engine.datascan.scan import DataScanError, load_tokenizer, scan_files
    from runbook.commands.common import fail

    configs = [p for p in paths or [] if p.suffix in (".yaml", ".yml")]   # never training text
    if len(configs) > 1:
        fail(ExitCode.USAGE, f"more than one run config given ({', '.join(map(str, configs))}); give one")
    config = chosen_config(configs[0] if configs else None, config)
    paths = [p for p in paths or [] if p not in configs]
    loaded = _load_config(config, needed=not paths or tokenizer is None)
    tok_dir = tokenizer or (loaded.data_path("tokenizer_dir") if loaded else None)
    assert tok_dir is not None   # no --tokenizer: the run config was needed, so loaded
    assert paths or loaded is not None   # no paths: the same
    try:
        files = _expand(paths) if paths or loaded is None else _configured_train_files(loaded)
        tok = load_tokenizer(tok_dir)
    except DataScanError as error:
        fail(ExitCode.BAD_CONFIG, f"{error}.")
    report = scan_files(files, tok, max_tokens, context_length)
    result = {"scan": report.to_dict()}
    if fix and not report.clean:
        result["fix"] = _fix(report, files, loaded, tok, max_tokens, context_length)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        _print_report(report)
        if "fix" in result:
            for line in result["fix"]["messages"]:
                out.print(line, soft_wrap=True)
        elif fix:
            out.print("nothing to fix")
    clean_now = result["fix"]["clean"] if "fix" in result else report.clean
    raise typer.Exit(int(ExitCode.OK if clean_now else ExitCode.DATA_ISSUES))


def _load_config(path: Path, needed: bool) -> LoadedConfig | None:
    from runbook.commands.common import fail
    from engine.trainers.run_config import load_config

    if not path.is_file():
        if needed:
            fail(ExitCode.BAD_CONFIG, f"run config {path} not found; it names the data and tokenizer (give it as CONFIG or -c).")
        return None
    return load_config(path)  # a SourceError becomes exit 3 with file:line in runbook.cli.main


def _expand(paths: list[Path]) -> list[Path]:
    from engine.datascan.scan import DataScanError, text_files

    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += text_files(path)
        elif path.is_file():
            files.append(path)
        else:
            raise DataScanError(f"{path} does not exist")
    if not files:
        raise DataScanError(f"no .txt files in {', '.join(map(str, paths))}")
    return files


def _configured_train_files(loaded: LoadedConfig) -> list[Path]:
    from engine.datascan.scan import DataScanError, text_files

    train_dir = _configured_dir(loaded, "train_dir")
    if not train_dir.is_dir():
        raise DataScanError(f"data.train_dir: folder {train_dir} does not exist ({loaded.path})")
    if not (files := text_files(train_dir)):
        raise DataScanError(f"data.train_dir: no .txt files in {train_dir}")
    return files


def _fix(report: ScanReport, files: list[Path], loaded: LoadedConfig | None, tok: Tokenizer, max_tokens: int, context_length: int | None) -> dict:
    """Clean every folder that has bad lines; repoint the config at the ones it trains on; rescan."""
    from engine.datascan.scan import fix_folder, scan_files, text_files
    from engine.core.config import compute_data_hash

    folders = sorted({Path(os.path.abspath(f)).parent for f in files if report.bad_lines_of(f)})
    configured = {key: _configured_dir(loaded, key) for key in ("train_dir", "val_dir")} if loaded else {}
    messages, repoint, written = [], {}, []
    for folder in folders:
        target = fix_folder(folder, report, extra_files=files)
        dropped = sum(len(report.bad_lines_of(f)) for f in files if Path(os.path.abspath(f)).parent == folder)
        written.append(str(target))
        messages.append(f"wrote {target} ({dropped:,} bad line(s) dropped); the original {folder} is untouched")
        for key, configured_dir in configured.items():
            if configured_dir.resolve() == folder.resolve():
                repoint[key] = target
    rescan = scan_files([p for t in written for p in text_files(Path(t))], tok, max_tokens, context_length)
    if repoint and loaded is not None:   # only a run config's folders are repointed
        train = repoint.get("train_dir", configured["train_dir"])
        val = repoint.get("val_dir", configured["val_dir"])
        data_hash = compute_data_hash(train, val)
        _set_data_dirs(loaded, repoint)
        loaded.reload().write_back({"data_hash": data_hash})
        for key, target in repoint.items():
            messages.append(f"{loaded.path}: data.{key} -> {_config_value(loaded, key, target)}")
        messages.append(f"{loaded.path}: data_hash -> {data_hash} (the trainer's data cache is rebuilt on the next launch)")
    else:
        messages.append("no run config trains on these folders; no config was changed")
    messages.append(f"cleaned data: {rescan.summary}")
    return {"written": written, "config_changes": {k: str(v) for k, v in repoint.items()},
            "clean": rescan.clean, "messages": messages}


def _configured_dir(loaded: LoadedConfig, key: str) -> Path:
    """data.<key> made absolute without resolving symlinks: the clean copy goes beside the folder as named."""
    return Path(os.path.abspath(loaded.project_dir / getattr(loaded.config.data, key)))


def _config_value(loaded: LoadedConfig, key: str, target: Path) -> str:
    """The new data.<key>: the old value with its last part renamed (kept relative) when that names target."""
    sibling = Path(getattr(loaded.config.data, key)).with_name(target.name)
    return str(sibling) if loaded.resolve(sibling) == target.resolve() else str(target)


def _set_data_dirs(loaded: LoadedConfig, repoint: dict[str, Path]) -> None:
    """Set data.<key> where the run keeps it (the run config, or the litgpt YAML it is based on)."""
    loaded.write_data_dirs({key: _config_value(loaded, key, target) for key, target in repoint.items()})


def _print_report(report: ScanReport) -> None:
    from engine.datascan.scan import KINDS

    cwd = Path.cwd()

    def where(path: str) -> str:
        try:
            return str(Path(path).relative_to(cwd))
        except ValueError:
            return path

    if report.findings:
        table = Table(title="bad lines", title_justify="left")
        table.add_column("file:line", no_wrap=True)
        table.add_column("kind", no_wrap=True)
        table.add_column("detail", overflow="fold")
        for f in report.findings[:SHOWN_FINDINGS]:
            table.add_row(f"{where(f.file)}:{f.line}", f.kind, f.detail)
        out.print(table)
        errors = sum(n for kind, n in report.counts.items() if kind != "empty")
        if errors > SHOWN_FINDINGS:
            out.print(f"... {errors - SHOWN_FINDINGS:,} more finding(s) not shown (--json lists up to {report.max_findings:,})")
    counts = Table(title="count per kind", title_justify="left")
    counts.add_column("kind")
    counts.add_column("lines", justify="right")
    for kind, n in sorted(report.counts.items(), key=lambda kv: KINDS.index(kv[0])):
        counts.add_row(kind + (" (info, not an error)" if kind == "empty" else ""), f"{n:,}")
    if report.counts:
        out.print(counts)
    out.print(report.summary, soft_wrap=True)
