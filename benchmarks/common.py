"""Shared helpers of the benchmarks: scratch projects, the bare trainer, log figures, the machine, docs.

Every benchmark trains the real tiny litgpt model of configs/run_config.yaml in scratch folders made
by `runbook drill`'s own `make_scratch_project` (same data, same playbooks; the repo's run is never
touched, and its tokenized data is not shared: a benchmark measures the same whatever the repository's
own run folder holds), and writes its own section of docs/benchmarks.md only with --write (other
sections are kept as they are). Every benchmark has --smoke: a few steps, one sample, nothing written
(tests/runs/test_benchmarks_smoke.py runs them). The benchmarks whose smoke checks the engine's path or the
harness's, not litgpt's (latency, log flood, false alarms, chaos, overhead), run their --smoke on the toy
trainer of tests/toy_trainer/ (`toy_settings`; --trainer toy does so in full mode too): a real process under
a real `runbook watch`, seconds where litgpt takes minutes. Their full mode trains litgpt, as their docs
sections say. The litgpt smokes (relaunch, spare contention) tokenize the corpus once per test session: the
suite sets $RUNBOOK_BENCH_DATA_CACHE, the first publishes litgpt's data cache there (share_data), the others
copy it (seed_data); unset (any run by hand), every run tokenizes as before.
"""

from __future__ import annotations

import io
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOCS = ROOT / "docs" / "benchmarks.md"
RUN_CONFIG = ROOT / "configs" / "run_config.yaml"
RUNBOOK = [sys.executable, "-m", "runbook.cli"]


# --- the machine ------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def cores() -> int:
    """The cores this process may run on (nproc)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def machine(load_at_start: str | None = None) -> str:
    """One line: nproc, CPU model, Python, torch/litgpt versions, load average (start and end)."""
    nproc = cores()
    load = f"load average (1, 5, 15 min) {load_at_start} at the start, {load_average()} at the end" if load_at_start \
        else f"load average (1, 5, 15 min) {load_average()}"
    return (f"nproc {nproc}, {cpu_model()}, {platform.system()} {platform.machine()}; Python {platform.python_version()}, "
            f"torch {package_version('torch')}, litgpt {package_version('litgpt')}; {load}")


def command_line() -> str:
    import shlex

    return "python " + shlex.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])   # as it can be pasted


# --- docs/benchmarks.md -------------------------------------------------------------------------


def write_section(title: str, body: str, doc: Path = DOCS, first: bool = False) -> None:
    """Replace the `## title` section of docs/benchmarks.md, keeping every other section byte for
    byte; a new section is appended (or, with first, put before the first `## ` section). The file
    is re-read right before writing: others edit it too."""
    from engine.core.durable import atomic_write_text

    heading = f"## {title}"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    section = f"{heading}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^{re.escape(heading)}[ \t]*\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section + "\n", text, count=1).rstrip("\n") + "\n"
    elif first and (m := re.search(r"^## ", text, re.M)):
        text = text[: m.start()] + section + "\n" + text[m.start():]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    atomic_write_text(doc, text)


def publish(args, section: str, load_at_start: str, *paragraphs: str) -> str:
    """A report: the command that made it and the machine, then the paragraphs; printed, and written as
    `section` of docs/benchmarks.md when should_write(args)."""
    body = "\n\n".join([f"Command: `{command_line()}`", f"Machine: {machine(load_at_start)}", *paragraphs])
    print(body)
    if should_write(args):
        write_section(section, body)
    return body


def table(headers: list[str], rows: list[list], right: set[int] | None = None) -> str:
    """A Markdown table; columns in `right` are right-aligned."""
    right = right if right is not None else set(range(1, len(headers)))
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---:" if i in right else "---" for i in range(len(headers))) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- scratch projects ---------------------------------------------------------------------------


def scratch_project(root: Path, **settings) -> Path:
    """A scratch project under root trained on the repo's data with the repo's playbooks (runbook
    drill's make_scratch_project: a 40-step run, a checkpoint every 10 steps) plus `settings`
    (top-level keys, or sections as dicts). Returns its run config path.

    make_scratch_project links the repository run's tokenized data caches into the scratch run
    (share_run_data); they are unlinked here (the repository's files stay as they are), so the
    scratch run starts as it does in a fresh clone: its first launch makes its own cache, or the
    benchmark puts its own there. Either way no benchmark depends on, or writes through a link into,
    the repository's run folder."""
    from runbook.commands.drill_cmd import make_scratch_project
    from engine.trainers.run_config import load_config

    loaded = load_config(RUN_CONFIG)
    # The default corpus must exist (prepare_data's make_default, without its preflight: litgpt's parser run on
    # the config, ~30 s of imports on a loaded machine, per call; a launch that would fail says so itself).
    train_dir = loaded.data_path("train_dir")
    if loaded.config.data.kind == "text-files" and not any(train_dir.glob("*.txt")):
        from runbook.default_data import ensure_default_assets

        ensure_default_assets(train_dir.parent, loaded.data_path("tokenizer_dir"))
    if root.exists():
        shutil.rmtree(root)
    config = make_scratch_project(loaded, SimpleNamespace(config=settings), root)
    shutil.rmtree(load_config(config).run_dir / "data", ignore_errors=True)   # links only: unlinking them
    return config


DATA_CACHE_ENV = "RUNBOOK_BENCH_DATA_CACHE"


def seed_data(run_dir: Path) -> bool:
    """Copy litgpt's tokenized data caches from the folder named by $RUNBOOK_BENCH_DATA_CACHE (a run's
    run_dir/data that share_data published) into run_dir/data; True when done. Only the suite's smokes set
    it (one tokenizing per test session instead of one per benchmark); without it a run tokenizes on its
    first launch, as in a fresh clone."""
    from engine.trainers.litgpt.data_cache import is_complete

    shared = Path(os.environ.get(DATA_CACHE_ENV) or "/nonexistent")
    if not (shared.is_dir() and any(is_complete(folder) for folder in shared.iterdir())):
        return False
    shutil.rmtree(run_dir / "data", ignore_errors=True)
    shutil.copytree(shared, run_dir / "data", symlinks=True)
    return True


def share_data(run_dir: Path) -> None:
    """Publish run_dir/data (its launch built litgpt's data cache) as $RUNBOOK_BENCH_DATA_CACHE, if that is
    set and not there yet (copied aside, then renamed into place: a benchmark in another process may do the same)."""
    from engine.trainers.litgpt.data_cache import is_complete

    if not os.environ.get(DATA_CACHE_ENV):
        return
    shared = Path(os.environ[DATA_CACHE_ENV])
    data = run_dir / "data"
    if shared.exists() or not (data.is_dir() and any(is_complete(folder) for folder in data.iterdir())):
        return
    aside = shared.with_name(f"{shared.name}.{os.getpid()}.tmp")
    shutil.copytree(data, aside, symlinks=True)
    try:
        os.rename(aside, shared)
    except OSError:   # another benchmark published it first
        shutil.rmtree(aside, ignore_errors=True)


TOY_KIND = "python:tests.toy_trainer.adapter:ToyAdapter"   # tests/toy_trainer/adapter.py; the watcher needs PYTHONPATH=ROOT
TOY_PROGRESS = re.compile(r"^toy step (\d+)/\d+ loss (\S+) took ([\d.]+) ms$", re.M)


def toy_settings(steps: int, step_seconds: float = 0.05, save_interval: int = 10, **extra) -> dict:
    """scratch_project settings that train the toy trainer (tests/toy_trainer/trainer.py) instead of litgpt:
    `steps` steps of `step_seconds` each (the toy's steps are max_tokens / (16 x 64), the drill run's global
    batch), a checkpoint every save_interval, trainer.extra `extra` (notice_save, validate_interval, ...)."""
    return {"max_tokens": steps * 16 * 64, "save_interval": save_interval,
            "trainer": {"kind": TOY_KIND, "extra": {"step_seconds": step_seconds, **extra}}}


def trainer_flag(parser) -> None:
    """--trainer litgpt|toy: the full mode's default is litgpt (what the docs report); --smoke defaults to the toy."""
    parser.add_argument("--trainer", choices=["litgpt", "toy"], default=None,
                        help="the trainer the runs train (default litgpt; --smoke: toy, tests/toy_trainer/)")


def chosen_trainer(args) -> str:
    return args.trainer or ("toy" if getattr(args, "smoke", False) else "litgpt")


def docs_flags(parser, smoke_help: str) -> None:
    """--write (docs/benchmarks.md is written only when asked) and --smoke (a few steps, one sample,
    nothing written: what tests/runs/test_benchmarks_smoke.py runs)."""
    parser.add_argument("--write", action="store_true", help="write this benchmark's section of docs/benchmarks.md")
    parser.add_argument("--smoke", action="store_true", help=smoke_help + "; never writes docs")


def should_write(args) -> bool:
    """The docs are written only with --write, never in --smoke mode nor from a toy-trainer run."""
    if getattr(args, "trainer", None) == "toy" and getattr(args, "write", False) and not getattr(args, "smoke", False):
        print("\n(docs/benchmarks.md not written: its sections report litgpt runs, this one trained the toy)")
        return False
    if getattr(args, "smoke", False) or not getattr(args, "write", False):
        print("\n(docs/benchmarks.md not written; add --write)")
        return False
    return True


def load_run(config: Path):
    from engine.trainers.run_config import load_config

    return load_config(config)


def data_hash(config: Path) -> str:
    """The data_hash runbook's launch of this config gets (prepare_data's): for text files, the hash of the
    folders, which scratch_project checked already (prepare_data's litgpt preflight is not run again per
    launch: ~30 s of imports on a loaded machine, and the launch itself finds what it would)."""
    from runbook.watch_command import prepare_data

    loaded = load_run(config)
    if loaded.config.data.kind == "text-files":
        from engine.core.config import compute_data_hash

        return compute_data_hash(loaded.data_path("train_dir"), loaded.data_path("val_dir"))
    return prepare_data(loaded, accept_data_change=False, record_hash=False)


def litgpt_launch(config: Path, launch_dir: Path, resume: str | None = None):
    """The litgpt config and environment runbook would launch with (its own adapter writes them),
    for running litgpt without runbook. resume="auto" turns it into `--resume auto`."""
    from engine.core.durable import atomic_write_text
    from engine.trainers.litgpt.adapter import LitGPTAdapter
    from ruamel.yaml import YAML

    loaded = load_run(config)
    spec = LitGPTAdapter().prepare_launch(loaded, launch_dir, None, data_hash(config))
    if resume is not None:
        yaml = YAML(typ="safe", pure=True)
        tree = yaml.load(spec.config_file.read_text())
        tree["resume"] = resume
        buffer = io.StringIO()
        yaml.dump(tree, buffer)
        atomic_write_text(spec.config_file, buffer.getvalue())
    return spec


def start_bare(spec, log_path: Path) -> subprocess.Popen:
    """`litgpt pretrain --config X` with runbook's environment and memory limit, output to log_path."""
    limit = spec.memory_limit_bytes

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(spec.argv, cwd=spec.cwd, env=spec.env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=limit_memory if limit else None)


def start_watch(config: Path, log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen([*RUNBOOK, "watch", str(config)], cwd=config.parent.parent, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGCONT + SIGTERM (then SIGKILL) to a process we started and its session, if still running."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGCONT, signal.SIGTERM):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- reading what a run did ------------------------------------------------------------------------

PROGRESS = re.compile(r"^Epoch \d+ \| iter (\d+) step (\d+) \| loss train: (\S+), val: \S+ \| "
                      r"iter time: ([\d.]+) ms( \(step\))?", re.M)
FINAL = re.compile(r"^Final evaluation \| val loss: (\S+) \|", re.M)


@dataclass
class LogFigures:
    progress_lines: int = 0
    steps_computed: int = 0      # optimizer steps executed, over every launch (repeats included)
    last_step: int | None = None
    final_val_loss: float | None = None
    iter_ms: list | None = None
    first_loss: float | None = None  # the train loss on the first progress line: the untrained model's


def read_log(log: Path) -> str:
    """A trainer log, also when runbook's compress_logs gzipped it (trainer-N.log.gz)."""
    import gzip

    try:
        if log.suffix == ".gz":
            return gzip.decompress(log.read_bytes()).decode(errors="replace")
        return log.read_text(errors="replace")
    except (FileNotFoundError, EOFError, OSError):
        return ""


def trainer_logs(run_dir: Path) -> list[Path]:
    """<run_dir>/logs/trainer-N.log and .log.gz, in launch order."""
    return sorted((run_dir / "logs").glob("trainer-*.log*"), key=lambda p: p.name.split(".")[0])


def progress_lines(text: str) -> list[tuple[int, str, float, bool]]:
    """(step, train loss, iteration ms, whether the line ends an optimizer step) per progress line: litgpt's,
    or the toy trainer's (each of its lines is one optimizer step); a log holds one trainer's lines only."""
    found = [(int(m.group(2)), m.group(3), float(m.group(4)), m.group(5) is not None) for m in PROGRESS.finditer(text)]
    return found or [(int(m.group(1)), m.group(2), float(m.group(3)), True) for m in TOY_PROGRESS.finditer(text)]


def count_progress_lines(text: str) -> int:
    return len(progress_lines(text))


def log_figures(logs: list[Path]) -> LogFigures:
    out = LogFigures(iter_ms=[])
    for log in logs:
        text = read_log(log)
        for step, loss, iter_ms, is_step in progress_lines(text):
            out.progress_lines += 1
            if out.first_loss is None:
                try:
                    out.first_loss = float(loss.rstrip(","))
                except ValueError:
                    pass
            out.steps_computed += is_step
            out.last_step = step
            out.iter_ms.append(iter_ms)
        if found := FINAL.findall(text):
            out.final_val_loss = float(found[-1])
    return out


def final_progress(out_dir: Path) -> dict | None:
    """iter_num and step_count of out_dir/final/lit_model.pth (the toy's: step_count of final/state.json), or
    None when the run did not finish."""
    from engine.trainers.litgpt.resume import read_progress

    toy_state = out_dir / "final" / "state.json"   # the toy trainer's final/ (tests/toy_trainer/trainer.py)
    if toy_state.exists():
        import json

        try:
            return {"step_count": json.loads(toy_state.read_text())["step"]}
        except (OSError, ValueError, KeyError):
            return None
    pth = out_dir / "final" / "lit_model.pth"
    try:
        return read_progress(pth) if pth.exists() else None
    except Exception:  # noqa: BLE001 - a partial final file counts as not finished
        return None


def incidents(run_dir: Path) -> list[dict]:
    import json

    folder = run_dir / "incidents"
    if not folder.exists():
        return []
    return sorted((json.loads(p.read_text()) for p in folder.glob("incident-*.json")),
                  key=lambda r: int(r["id"].rsplit("-", 1)[-1]))


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


def checkpoint_done(out_dir: Path, step: int) -> bool:
    """The step folder's save is complete (litgpt writes the side files after lit_model.pth)."""
    return (out_dir / f"step-{step:08d}" / "model_config.yaml").exists()


def mount_tmpfs(where: Path, size_mb: float) -> str | None:
    """Mount a tmpfs of size_mb at where; None when done, else why not (not root, mount refused)."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size_mb * 1024)}k", "tmpfs", str(where)],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else f"mount refused: {done.stderr.strip()}"


def unmount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def median(values):
    import statistics

    return statistics.median(values) if values else float("nan")
