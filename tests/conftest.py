"""Shared fixtures: real scratch projects and helpers to run `runbook watch` on them.

Two trainers, both real processes under a real `runbook watch`, broken from outside; nothing of the
engine is mocked:
- `project` / `reference_run`: the toy trainer (tests/toy_trainer/), the scenario suite's default. It
  runs a 40-step run in about 2 s where litgpt takes a minute, and keeps runbook's contract with a
  trainer as litgpt does under runbook (progress lines, announced saves, a notice save exiting 75,
  validation lines), so a scenario proves the engine, not the model.
- `litgpt_project` / `litgpt_reference_run`: a real tiny litgpt model on the CPU, for the litgpt
  contract suite (tests/litgpt/): its real log lines, notice save, micro-batch rescale, checkpoint
  CRC scan and bit-identical weights. The corpus and tokenizer are made once per session and linked
  into each project; the reference run is trained once per session, whatever the number of workers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from runbook.default_data import ensure_default_assets
from engine.core.yaml_source import round_trip_yaml, update_yaml_values
from tests.hang_watchdog import pytest_configure, pytest_handlecrashitem, pytest_runtest_protocol  # noqa: F401 - hooks: each test under a hang limit
from tests.waiting_worker import WAITS_GROUP, make_scheduler

REPO = Path(__file__).resolve().parent.parent
RUNBOOK = str(Path(sys.executable).parent / "runbook")

# A short run: 40 optimizer steps of 16 x 64 tokens, a checkpoint every 10 steps.
SHORT_RUN = {"max_tokens": 40960, "save_interval": 10, "keep_last_k": 10}


def session_shared_folder(tmp_path_factory) -> Path:
    """The folder every xdist worker of this session sees (the workers' temporary folders' parent), or this
    process's own temporary folder without xdist: what is built there is built once per session."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def session_lock(folder: Path, name: str):
    """An exclusive lock shared by the session's workers (released when the file closes, also on failure)."""
    import fcntl

    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def shared_data(tmp_path_factory) -> Path:
    """The default corpus and tokenizer, made once per session for both xdist workers (read-only to tests:
    one that changes data copies it first), with the tokenized data caches seed_data_cache adds to it."""
    shared = session_shared_folder(tmp_path_factory)
    root = shared / "shared-data"
    with session_lock(shared, "shared-data"):
        if not (shared / "shared-data.done").exists():
            if root.exists():
                shutil.rmtree(root)   # a half-made corpus of a failed attempt
            ensure_default_assets(root / "stdlib", root / "tokenizer")
            (shared / "shared-data.done").write_text("ok\n")
    return root


TOY_KIND = "python:tests.toy_trainer.adapter:ToyAdapter"


class Project:
    """A scratch project folder laid out like the repo: configs/, playbooks path, data/. Its trainer's
    checkpoint layout is read from the run config when first asked for (litgpt's or the toy's)."""

    def __init__(self, root: Path):
        self.root = root
        self.config = root / "configs" / "run_config.yaml"
        self.out_dir = root / "checkpoints" / "pretrain"
        self.run_dir = root / "runs" / "pretrain"
        self.run_log = root / "docs" / "run-log.md"

    def set(self, **updates) -> None:
        """Top-level keys or nested sections (dicts are merged) in the run config, comments kept."""
        yaml = round_trip_yaml()
        tree = yaml.load(self.config.read_text())
        for key, value in updates.items():
            if isinstance(value, dict) and key in tree:
                for sub, subvalue in value.items():
                    tree[key][sub] = subvalue
            else:
                tree[key] = value
        with open(self.config, "w") as fh:
            yaml.dump(tree, fh)

    def watch(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        log = open(self.root / "watch.log", "ab")
        return subprocess.Popen(
            [RUNBOOK, "watch", str(self.config), *args], stdout=log, stderr=subprocess.STDOUT,
            cwd=self.root, env={**os.environ, **(env or {})},
        )

    def watch_output(self) -> str:
        path = self.root / "watch.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def trainer_pid(self) -> int:
        return int((self.run_dir / "trainer.pid").read_text())

    @property
    def is_toy(self) -> bool:
        return TOY_KIND in self.config.read_text()

    @property
    def layout(self):
        from engine.trainers import adapter_for

        return adapter_for(TOY_KIND if self.is_toy else "litgpt").layout

    def step_dir(self, step: int) -> Path:
        return self.out_dir / self.layout.folder_name(step)

    def saved(self, step: int) -> bool:
        """Checkpoint `step` is completely written: its last file is there (litgpt writes model_config.yaml
        after lit_model.pth; the toy its checksum after state.json)."""
        return (self.step_dir(step) / ("state.sha256" if self.is_toy else "model_config.yaml")).exists()

    def incidents(self, include_slow: bool = False) -> list[dict]:
        """Every incident record, in id order, with one exception that is checked, never assumed: a
        slow-training incident whose diagnosis names a cause outside the run (another process, the host, a
        throttle) and that changed nothing (no relaunch, no setting) is the machine's load told right, and
        is left out unless include_slow. A slow-training incident diagnosed inside the run ("compute",
        "unknown"), or one that relaunched or changed the run, is a false alarm: it stays in the list and
        fails the test's exact incident list (issue 27: no hidden false alarms)."""
        import json

        folder = self.run_dir / "incidents"
        records = [json.loads(p.read_text()) for p in sorted(folder.glob("incident-*.json"), key=_incident_number)] if folder.exists() else []
        return [r for r in records if include_slow or not machine_slowness(r)]

    def final_weights(self) -> str:
        if self.is_toy:   # its weights are JSON floats, which round-trip exactly: the bytes are the weights
            import hashlib

            return hashlib.sha256((self.out_dir / "final" / "state.json").read_bytes()).hexdigest()
        return weights_digest(self.out_dir / "final" / "lit_model.pth")

    def assert_same_result_as(self, reference: dict) -> None:
        """Parity with an undisturbed run: the same counters and bit-identical final weights. On the CPU, in one
        session, a litgpt resume restores the model, the optimizer and the data loader's position, so a
        recovered run that kept every hyperparameter ends with the same bytes as the reference (measured:
        kill -9, notice save, SIGSTOP hang, corrupt checkpoints, a re-run after an escalation)."""
        assert self.final_progress() == reference["progress"]
        if self.is_toy:
            assert self.final_weights() == reference["weights"], (self.final_state(), reference["project"].final_state())
            return
        assert self.final_weights() == reference["weights"], weights_difference(
            reference["project"].out_dir / "final" / "lit_model.pth", self.out_dir / "final" / "lit_model.pth")

    def final_progress(self) -> dict:
        if self.is_toy:
            return {"step_count": self.final_state()["step"]}
        from engine.trainers.litgpt.resume import read_progress

        return read_progress(self.out_dir / "final" / "lit_model.pth")

    def final_state(self) -> dict:
        """The toy's final state (its step and weights)."""
        import json

        return json.loads((self.out_dir / "final" / "state.json").read_text())


OUTSIDE_CAUSES = {"contention", "steal", "throttled", "stopped"}
CHANGING_VERBS = {"resume", "rollback", "stop_trainer", "restart", "set_hyperparameters", "set_env", "prune_checkpoints"}


def machine_slowness(record: dict) -> bool:
    """A slow-training incident the machine's load explains (see Project.incidents)."""
    if record.get("playbook") != "slow-training":
        return False
    cause = (record.get("diagnosis") or {}).get("cause")
    verbs = {a.get("verb") for a in record.get("actions", [])}
    return cause in OUTSIDE_CAUSES and not verbs & CHANGING_VERBS


def _model_state(path: Path) -> dict:
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    return state.get("model", state)


def weights_digest(path: Path) -> str:
    """sha256 over every tensor of a litgpt checkpoint's model, in name order (names, dtypes, shapes, bytes)."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(_model_state(path).items()):
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def weights_difference(reference: Path, got: Path) -> str:
    """Where two final models differ (for the assertion message)."""
    a, b = _model_state(reference), _model_state(got)
    worst = sorted(((float((a[k].float() - b[k].float()).abs().max()), k) for k in a if k in b and a[k].shape == b[k].shape), reverse=True)
    return f"final weights differ from the reference: largest differences {worst[:3]}; missing {sorted(set(a) ^ set(b))[:5]}"


def _incident_number(path: Path) -> int:
    return int(path.stem.split("-")[1])


TOY_STEPS, TOY_STEP_SECONDS = 40, 0.03   # the shipped config's max_tokens 40960 = 40 steps of 16 x 64 tokens


def make_toy_project(root: Path, step_seconds: float = TOY_STEP_SECONDS, notice_save: bool = True,
                     save_interval: int = 5, **updates) -> Project:
    """A project whose trainer is the toy: the shipped run config (its comments, its playbook settings) with
    `trainer.kind` the toy's, 40 steps, a checkpoint every `save_interval`. `notice_save: False` makes a
    trainer that dies of SIGTERM (the steps since its last save are lost)."""
    (root / "configs").mkdir(parents=True)
    shutil.copy(REPO / "configs" / "run_config.yaml", root / "configs" / "run_config.yaml")
    for name in ("train", "val"):   # `runbook watch` checks the data folders; the toy reads none of it
        (root / "data" / name).mkdir(parents=True)
        (root / "data" / name / "a.txt").write_text("toy\n")
    # No tokenizer: the toy reads no text, and what a trainer needs besides the data is its adapter's to say.
    project = Project(root)
    project.set(max_tokens=TOY_STEPS * 16 * 64, save_interval=save_interval, keep_last_k=20, data_hash="",
                data={"train_dir": "data/train", "val_dir": "data/val", "tokenizer_dir": "data/tokenizer",
                      "make_default": False},
                trainer={"kind": TOY_KIND, "extra": {"step_seconds": step_seconds, "notice_save": notice_save}})
    if updates:
        project.set(**updates)
    return project


def run_watch(project: Project, fault: str | None = None, timeout: float = 120.0, env: dict | None = None) -> float:
    """`runbook watch` on the project until it exits 0, with one drill fault of engine/watch/faults.py injected
    (toy or litgpt, by the project's trainer); returns the seconds it took."""
    from engine.trainers import adapter_for
    from engine.watch.faults import FAULTS, DrillRun

    started = time.monotonic()
    watcher = project.watch(env={"PYTHONPATH": str(REPO), **(env or {})})   # the watcher imports tests.toy_trainer
    try:
        if fault is not None:
            adapter = adapter_for(TOY_KIND if project.is_toy else "litgpt")
            FAULTS[fault].inject(DrillRun(project.out_dir, project.run_dir, watcher, adapter, timeout))
        assert watcher.wait(timeout=timeout) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    return time.monotonic() - started


def make_project(root: Path, shared_data: Path, prebuilt_data: bool = True, **updates) -> Project:
    """A litgpt project on the shared corpus. prebuilt_data: its run folder starts with a copy of the tokenized
    data cache its launches would build (seed_data_cache); tests of preprocessing itself pass False."""
    (root / "configs").mkdir(parents=True)
    shutil.copy(REPO / "configs" / "run_config.yaml", root / "configs" / "run_config.yaml")
    (root / "data").mkdir()
    (root / "data" / "stdlib").symlink_to(shared_data / "stdlib")
    (root / "data" / "tokenizer").symlink_to(shared_data / "tokenizer")
    project = Project(root)
    # litgpt's own parser reading the config before each launch costs ~5 s of imports: tests/litgpt/test_preflight.py
    # proves it (and `runbook check` always runs it); the other tests' launches skip it.
    project.set(trainer={"preflight_parse": False})
    project.set(**{**SHORT_RUN, **updates})   # playbooks: the shipped set (the project has no playbooks/)
    if prebuilt_data:
        seed_data_cache(project, shared_data)
    return project


def seed_data_cache(project: Project, shared_data: Path) -> None:
    """Copy the litgpt data cache this project's launches read into its run folder, built once per session.

    Tokenizing the corpus (litdata's optimize, which spawns a fresh interpreter per split) costs several
    seconds of every first launch; each project would build the same bytes under the same key (the key
    covers the text, tokenizer, block size and data arguments, not paths), so the copy is what the launch
    would have made. tests/litgpt/test_data_cache.py and the README run build it the real way."""
    from engine.core.config import compute_data_hash
    from engine.trainers.run_config import load_config
    from engine.trainers.litgpt import data_cache
    from engine.trainers.litgpt.launch import place_cache, trainer_config

    loaded = load_config(project.config)
    if loaded.config.trainer.kind != "litgpt" or loaded.config.data.kind != "text-files":
        return
    train, val, tokenizer = (loaded.data_path(n) for n in ("train_dir", "val_dir", "tokenizer_dir"))
    cache, block_size = place_cache(loaded, trainer_config(loaded, Path(), Path(), None), compute_data_hash(train, val))
    if cache is None or cache.exists():
        return
    built = shared_data / "data-caches" / cache.name
    with session_lock(shared_data.parent, f"data-cache-{cache.name}"):   # both workers want the same cache
        if not data_cache.is_complete(built):
            subprocess.run([*data_cache.preprocess_argv(sys.executable, built, train, val, tokenizer, block_size)[:-1]],
                           check=True, capture_output=True, timeout=600)
    shutil.copytree(built, cache, symlinks=True)


@pytest.fixture
def project(tmp_path) -> Project:
    """A toy-trainer project (see the module's docstring): the default for a scenario."""
    return make_toy_project(tmp_path / "project")


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> dict:
    """An undisturbed toy run of `project`'s configuration: what every recovered toy run must end up equal to."""
    project = make_toy_project(tmp_path_factory.mktemp("reference") / "project")
    run_watch(project)
    assert project.incidents() == []
    return {"progress": project.final_progress(), "weights": project.final_weights(), "project": project}


@pytest.fixture
def litgpt_project(tmp_path, shared_data) -> Project:
    return make_project(tmp_path / "project", shared_data)


@pytest.fixture(scope="session")
def litgpt_reference_run(tmp_path_factory, shared_data) -> dict:
    """An undisturbed litgpt run of the short configuration: what every recovered litgpt run must end up
    equal to. Trained once per session: the first xdist worker to ask trains it under a lock in the
    session's shared temporary folder, the other reads the same folder (a minute of two cores saved)."""
    shared = session_shared_folder(tmp_path_factory)
    root = shared / "litgpt-reference"
    with session_lock(shared, "litgpt-reference"):
        project = Project(root / "project")
        if not (root / "done").exists():
            if root.exists():
                shutil.rmtree(root)   # a half-made reference of a failed attempt
            project = make_project(root / "project", shared_data)
            proc = project.watch()
            assert proc.wait(timeout=300) == 0, project.watch_output()
            (root / "done").write_text("ok\n")
    return {"progress": project.final_progress(), "weights": project.final_weights(), "project": project}


def wait_for(predicate, timeout: float, interval: float = 0.1, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


HELD_TRAINERS: list = []   # psutil.Process of each trainer a test held (SIGSTOP); see _no_trainer_left_held


@pytest.fixture(autouse=True)
def _no_trainer_left_held():
    """Whatever a test's outcome, no trainer it held stays behind it, stopped (a failed test left one)."""
    yield
    while HELD_TRAINERS:
        process = HELD_TRAINERS.pop()
        if process.is_running():   # the same process (psutil compares its start time), never a reused pid
            with contextlib.suppress(psutil.NoSuchProcess):   # it may end between the check and the kill (seen in CI)
                process.kill()


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


__all__ = ["Project", "make_project", "make_toy_project", "run_watch", "wait_for", "stop_process", "update_yaml_values"]


# Hypothesis profiles: "quick" by default (CI), HYPOTHESIS_PROFILE=long for a long run. Real files and
# real engine calls make an example take tens of milliseconds, so there is no per-example deadline.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("quick", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


# The fast tier (`pytest -m "not slow"`): every test that trains a real model, starts a real watcher or
# scheduler, or lives in a group of such tests is marked slow here, so no file has to remember it.
SLOW_GROUPS = {"runs", "cluster", "litgpt"}
# By definition, not by name: a test module's own cheap `project` fixture (a scratch folder, no model) does
# not make its tests slow (tests/language/test_incidents_replay.py's did, by its name alone).
SLOW_FIXTURES = {"project": "tests.conftest", "reference_run": "tests.conftest", "shared_data": "tests.conftest",
                 "litgpt_project": "tests.conftest", "litgpt_reference_run": "tests.conftest",
                 "finished_run": "tests.unit.test_report_status", "slurm": "tests.cluster.test_slurm_submit"}


def _uses_slow_fixture(item) -> bool:
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}) or {}
    return any(chain and getattr(chain[-1].func, "__module__", None) == SLOW_FIXTURES[name]
               for name, chain in defs.items() if name in SLOW_FIXTURES)


# On pytest-xdist workers (README: `-n 3 --dist loadgroup`: two for the CPU, the third for the tests marked `waits`,
# tests/waiting_worker.py). A file with module fixtures (a reference run, a finished run) is one unit of work, so
# they are built once; every file that starts a SLURM cluster (tests/slurm_cluster.py, tests/two_hosts.py) shares
# one worker, because the clusters share munge, the package install and the machine's namespaces; the `waits` tests
# share the waiting worker; any other test goes to whichever CPU worker is free.
SLURM_FIXTURE_MODULES = {"tests.slurm_cluster", "tests.two_hosts"}


def _starts_slurm(item) -> bool:
    module = getattr(item, "module", None)
    return module is not None and any(getattr(value, "__module__", None) in SLURM_FIXTURE_MODULES
                                      for value in vars(module).values())
# One torch/OpenMP thread per process the tests start (watchers pass it to their trainers): two workers'
# trainers, each with a thread per core, would oversubscribe two cores, and OpenMP's spinning threads
# make that far slower than one thread each (the tiny model gains nothing from a second thread). A
# test that sets trainer.env's OMP_NUM_THREADS still gets its own value.
os.environ.setdefault("OMP_NUM_THREADS", "1")
SHARED_SCOPES = {"module", "package", "class"}


def _shares_fixtures(item) -> bool:
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}) or {}
    return any(getattr(d, "scope", "function") in SHARED_SCOPES for chain in defs.values() for d in chain)


def pytest_sessionstart(session):
    """Bytecode for the repository's own modules, written once before any test starts a process. The suite starts
    thousands of Python processes (watchers, CLIs, launchers, trainers); where PYTHONDONTWRITEBYTECODE is set (this
    machine's environment has it) none writes its bytecode, so each compiled every repository module it imported
    from source: ~0.3-0.5 CPU s of a toy watch run's 2.4 (measured with and without). Reading bytecode is not
    writing it, so every process reads what this writes; a module edited later is compiled from source again."""
    if hasattr(session.config, "workerinput"):   # xdist's controller does it, before its workers start
        return
    import compileall

    for package in ("engine", "runbook", "tests", "benchmarks"):
        compileall.compile_dir(str(REPO / package), quiet=1)


# A wrapper: its first half runs before every plain hook, and so before xdist's, which writes each item's
# group into the node id the scheduler splits on.
@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        relative = Path(str(item.fspath)).resolve().relative_to(REPO / "tests")
        group = relative.parts[0]
        if group in SLOW_GROUPS or _uses_slow_fixture(item):
            item.add_marker(pytest.mark.slow)
        waits = item.get_closest_marker("waits") is not None
        if _starts_slurm(item):
            item.add_marker(pytest.mark.xdist_group("slurm"))
        elif _shares_fixtures(item) and item.get_closest_marker("xdist_group") is None:   # a test's own group wins
            item.add_marker(pytest.mark.xdist_group(relative.as_posix()))
        elif waits:
            item.add_marker(pytest.mark.xdist_group(WAITS_GROUP))
        if waits and _group_of(item) != WAITS_GROUP:
            raise pytest.UsageError(f"{item.nodeid} is marked waits, but its group is {_group_of(item)!r} (a module "
                                    "fixture or a SLURM cluster keeps it with its file): it cannot run on the waiting worker")
    result = yield
    _check_groups_reach_the_scheduler(config, items)
    return result


def _group_of(item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    return None if marker is None else (marker.args[0] if marker.args else marker.kwargs.get("name"))


@pytest.hookimpl(tryfirst=True, optionalhook=True)   # before xdist's own; optional: absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    """loadgroup with a worker of its own for the tests marked `waits` (tests/waiting_worker.py)."""
    return make_scheduler(config, log)


def _check_groups_reach_the_scheduler(config, items) -> None:
    """On an xdist worker with --dist loadgroup, every grouped item's node id must carry its group, or the
    scheduler splits the group silently (pytest-dev/pytest-xdist#1386: pytest 9.2 stopped reading the field
    xdist writes; a SLURM file's module fixture then ran on both workers at once). Fail the run instead."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not config.getoption("loadgroup", default=None):   # absent under -p no:xdist
        return
    lost = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        message = (f"--dist loadgroup is not grouping: {len(lost)} grouped test(s) reach the scheduler without their "
                   f"group (e.g. {lost[0]}); pytest {pytest.__version__} with this pytest-xdist ignores xdist_group "
                   f"(pytest-dev/pytest-xdist#1386): use pytest < 9.2")
        print(message, file=sys.__stderr__, flush=True)   # xdist's controller reports only its own assertion
        raise pytest.UsageError(message)


# =====================================================================================================
# Skips and counts (issue 27 items 6-8). A separate block: the rest of this file is other people's.
# - Every run ends with the list of skips and their reasons (pytest_terminal_summary), -q or not.
# - require_capability(reason): a test that cannot run here for lack of a capability CI has (root, a
#   tmpfs mount, apt-get, SLURM) skips on a developer's machine and FAILS where CI runs: root on Linux
#   (CI's machine), or RUNBOOK_NO_SKIPS=1; RUNBOOK_NO_SKIPS=0 turns it back into a skip (a root
#   container without those capabilities).
# - record_evidence(line): a count a doc quotes, printed in the same summary with its seed and profile.
# =====================================================================================================
from typing import NoReturn  # noqa: E402

EVIDENCE: list[str] = []  # every count reported in this run (the controller's list under xdist)
_UNREPORTED: list[str] = []  # counts recorded in this process since the last test report


def where_ci_runs() -> bool:
    """True where a missing capability means a broken machine, not a developer's laptop."""
    chosen = os.environ.get("RUNBOOK_NO_SKIPS")
    if chosen in ("0", "1"):
        return chosen == "1"
    return sys.platform.startswith("linux") and os.geteuid() == 0


def require_capability(reason: str) -> NoReturn:
    """This test lacks a capability CI has (`reason` says which): skip here, fail where CI runs."""
    if where_ci_runs():
        pytest.fail(f"{reason} (CI's machine has this capability: as root on Linux, or with RUNBOOK_NO_SKIPS=1, "
                    f"its absence fails instead of skipping; RUNBOOK_NO_SKIPS=0 to skip)", pytrace=False)
    pytest.skip(reason)


def record_evidence(line: str) -> None:
    """A count a doc quotes: printed now (-s) and in the end-of-run summary (always)."""
    _UNREPORTED.append(line)
    print(line)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Counts travel on the test's report, so a worker's counts reach the summary of the whole run."""
    report = (yield).get_result()
    while _UNREPORTED:
        report.user_properties.append(("evidence", _UNREPORTED.pop(0)))


def pytest_runtest_logreport(report):
    EVIDENCE.extend(value for key, value in report.user_properties if key == "evidence")


def hypothesis_profile() -> str:
    return f"{os.environ.get('HYPOTHESIS_PROFILE', 'quick')} profile, {settings.default.max_examples} examples"


def hypothesis_seed() -> int:
    """RUNBOOK_FUZZ_SEED when set (to reproduce a printed run), else a fresh one (printed with the counts)."""
    import random

    return int(os.environ.get("RUNBOOK_FUZZ_SEED") or random.SystemRandom().randrange(2**31))


def seeded(test, seed: int):
    """A @given test run from `seed` without the example database, so the same seed makes the same
    cases and the same counts (the database replays earlier failures and would change them)."""
    import hypothesis

    return hypothesis.seed(seed)(settings(database=None)(test))


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if getattr(r, "nodeid", None) is not None]
    policy = ("a missing capability CI has fails here instead: root on Linux or RUNBOOK_NO_SKIPS=1" if where_ci_runs()
              else "a missing capability CI has skips here: not root, or RUNBOOK_NO_SKIPS=0")
    terminalreporter.write_sep("=", f"skips: {len(skipped)} ({policy})")
    for report in skipped:
        terminalreporter.write_line(f"SKIPPED {report.nodeid}: {_skip_reason(report)}")
    if not skipped:
        terminalreporter.write_line("none")
    if EVIDENCE:
        terminalreporter.write_sep("=", "counts reported by the tests (docs quote these lines)")
        for line in EVIDENCE:
            terminalreporter.write_line(line)


# =====================================================================================================
# A real full disk: a small tmpfs (root only; require_capability otherwise) and a filler for its free blocks.
# =====================================================================================================
import errno  # noqa: E402


def can_mount_tmpfs(where: Path) -> str | None:
    """None where a tmpfs can be mounted at `where` (made if missing), else why not."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        return f"mount refused: {done.stderr.strip()}"
    subprocess.run(["umount", str(where)], check=True)
    return None


@pytest.fixture
def tmpfs():
    """mount(where, size): a tmpfs of that size at `where`, unmounted after the test."""
    mounted: list[Path] = []

    def mount(where: Path, size: str) -> Path:
        reason = can_mount_tmpfs(where)
        if reason:
            require_capability(reason)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)])


def fill(folder: Path) -> Path:
    """A filler file that takes every free block of the folder's tmpfs."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as error:
        assert error.errno == errno.ENOSPC, error
    finally:
        os.close(fd)
    return filler


def assert_recovered_in_the_end(incidents: list[dict]) -> None:
    """Every incident recovered, except one whose relaunch failed again the same way before training (issue 44
    item 7: `failed`, "not recovered: ...") when a later incident took over; the last one recovered."""
    assert incidents, "no incident"
    for earlier, later in zip(incidents, incidents[1:]):
        if earlier["outcome"] == "failed":
            assert any(str(n).startswith("not recovered: ") for n in earlier.get("notes") or []), earlier
            assert later["playbook"] == earlier["playbook"], (earlier["playbook"], later["playbook"])
        else:
            assert earlier["outcome"] == "recovered", earlier
    assert incidents[-1]["outcome"] == "recovered", incidents[-1]
