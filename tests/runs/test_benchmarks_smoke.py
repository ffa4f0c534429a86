"""Every benchmark under benchmarks/ in its --smoke mode (a few steps, one sample): a product change
that breaks a benchmark fails here, not on the day someone reruns it (issue 29).

Each test checks the report's structure and the contenders' outcomes (not the speed: the suite runs on
shared cores), and that the benchmark left the repository's run folder, checkpoints and
docs/benchmarks.md as they were (a benchmark writes docs only with --write). The cheap benchmarks run
in-process; the ones that train run as the README says they are run, `python benchmarks/X.py --smoke
--root DIR`. The smokes whose code path is the engine's or the harness's (latency, log flood, false
alarms, chaos, overhead) train the toy trainer (tests/toy_trainer/), as their --smoke does (their full mode
trains litgpt); the ones timing litgpt's own relaunch (relaunch, spare contention) train litgpt, as small as
still resumes. Slow tier (tests/runs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, make_project, record_evidence, session_lock, session_shared_folder

REPO = Path(__file__).resolve().parents[2]
SMOKE_TIMEOUT_S = 1800   # a loaded CI machine runs these several times slower than idle cores


def repo_state() -> dict:
    """What a benchmark must leave alone: the repository's run folder and checkpoints (names and sizes).
    docs/benchmarks.md is checked by what the benchmark says (subprocesses) or by refusing its writes
    (in-process): its bytes can change under a shared working tree while a smoke runs."""
    state = {}
    for top in ("runs", "checkpoints"):
        for path in sorted((REPO / top).rglob("*")) if (REPO / top).exists() else []:
            if path.is_file() and not path.is_symlink():
                state[str(path.relative_to(REPO))] = path.stat().st_size
    return state


@pytest.fixture
def untouched_repo(monkeypatch):
    from benchmarks import bench_datascan, bench_matching, common

    def refuse(*_args, **_kwargs):
        raise AssertionError("a benchmark wrote docs/benchmarks.md without --write")

    for module in (common, bench_datascan, bench_matching):   # publish() writes through common's
        monkeypatch.setattr(module, "write_section", refuse)
    before = repo_state()
    yield
    after = repo_state()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"a benchmark wrote into the repository: {changed[:10]}"


@pytest.fixture(scope="session")
def litgpt_data(tmp_path_factory, shared_data) -> dict:
    """The environment that lets the litgpt smokes (relaunch, spare contention) skip tokenizing the corpus: the
    folder holds the suite's own tokenized cache of the default corpus (tests/conftest.py seed_data_cache, made
    once per session), which the benchmarks copy (benchmarks/common.py seed_data). The cache's key covers the
    text, tokenizer and block size, so a benchmark whose data differ finds no cache of its key there and
    tokenizes as in a fresh clone. Under xdist the folder is the session's, shared by the workers."""
    shared = session_shared_folder(tmp_path_factory)
    folder = shared / "benchmark-litgpt-data"
    with session_lock(shared, "benchmark-litgpt-data"):
        if not folder.exists():
            seeded = make_project(tmp_path_factory.mktemp("benchmark-data") / "project", shared_data)
            shutil.copytree(seeded.run_dir / "data", folder.with_name(f"{folder.name}.tmp"), symlinks=True)
            folder.with_name(f"{folder.name}.tmp").rename(folder)   # whole or absent, if the copy fails
    return {"RUNBOOK_BENCH_DATA_CACHE": str(folder)}


def run_benchmark(script: str, root: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    started = time.monotonic()
    done = subprocess.run([sys.executable, f"benchmarks/{script}", "--smoke", "--root", str(root), *extra], cwd=REPO,
                          capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    record_evidence(f"`python benchmarks/{script} --smoke --root DIR{''.join(' ' + e for e in extra)}`: exit {done.returncode}, "
                    f"{time.monotonic() - started:.0f} s (repository run folder: {'present' if (REPO / 'runs').exists() else 'absent'})")
    assert done.returncode == 0, f"{script} --smoke exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert "docs/benchmarks.md not written" in done.stdout or script == "bench_spare_contention.py"
    return done


# --- in-process: no training -----------------------------------------------------------------


def test_matching_smoke(untouched_repo):
    from benchmarks import bench_matching

    figures = bench_matching.main(["--smoke"])
    assert figures["shipped_playbooks"] > 0 and figures["generated_playbooks"] == 200
    assert figures["shipped_obs_per_s"] > 0 and figures["generated_obs_per_s"] > 0
    assert figures["replay_lines"] == 10_000 and figures["replay_observations"] == 1_000
    assert [name for name, _ in figures["rows"]][0].startswith("decide, shipped playbooks")


def test_datascan_smoke(untouched_repo, tmp_path):
    from benchmarks import bench_datascan

    figures = tmp_path / "datascan.json"
    assert bench_datascan.main(["--smoke", "--json", str(figures)]) == 0   # both found exactly the planted lines
    results = json.loads(figures.read_text())
    assert results["bad_lines"] > 0 and results["ratio"] > 3, results   # >35x measured on 100 MB: faster is > 1


def test_yaml_load_smoke(untouched_repo):
    from benchmarks import bench_yaml_load

    paths = sorted((REPO / "playbooks").glob("*.yaml"))
    assert bench_yaml_load.read_through_libyaml(paths) == paths   # the fast path in use, for every shipped playbook
    times = bench_yaml_load.measure(paths, samples=3)   # the median of 3: one sample slowed by the machine is outvoted
    assert bench_yaml_load.speedup(times) > 1.5, times             # ~3x measured (docs/benchmarks.md): faster is > 1


def test_litgpt_import_smoke(untouched_repo):
    from benchmarks import bench_litgpt_import

    results = bench_litgpt_import.measure(samples=1)
    [(lean_cpu, _, *lean_imported)] = results["runbook's entry (lean_imports)"]
    [(plain_cpu, _, *plain_imported)] = results["plain `import litgpt.pretrain`"]
    assert lean_imported == [False, False] and plain_imported == [True, True], results   # the lean path in use
    assert plain_cpu > 1.1 * lean_cpu, results   # 1.46x in docs/benchmarks.md: the entry's start is the cheaper


def test_checkpoint_verify_smoke(untouched_repo, tmp_path, capsys):
    from benchmarks import bench_checkpoint_verify

    assert bench_checkpoint_verify.main(["--smoke", "--root", str(tmp_path / "verify")]) == 0
    out = capsys.readouterr().out
    for method in ("dd (disk read)", "sha256sum", "verify (CRC)", "seal"):
        assert f"| warm | {method}" in out, method
    assert "Goal (issue 7) not measured" in out        # --smoke leaves the page cache alone: warm figures only


def test_suite_cpu_smoke(untouched_repo, tmp_path):
    """The suite profiler's clock sees the CPU of a grandchild whose parent exited at once (the watcher ->
    launcher -> trainer case getrusage misses) and calls a test that sleeps idle, not busy."""
    from tests.conftest import require_capability

    done = run_benchmark("bench_suite_cpu.py", tmp_path / "suite-cpu")
    results = json.loads((tmp_path / "suite-cpu" / "results.json").read_text())
    rows = {r["id"].split("::")[-1]: r for r in results["rows"]}
    assert set(rows) == {"test_spins_in_a_grandchild", "test_waits"} and "2 passed" in results["outcome"], results
    if rows["test_waits"]["clock"] != "cgroup cpuacct":
        require_capability("the suite profiler's clock needs a writable cgroup v1 cpuacct controller (root)")
    assert rows["test_spins_in_a_grandchild"]["cpu_s"] >= 0.9, rows   # its 1 CPU s, though never reaped by us
    waits = rows["test_waits"]
    assert waits["wall_s"] >= 1.0 and waits["cpu_s"] < 0.5, waits
    assert "| test_smoke_cpu.py | 2 |" in done.stdout and "cannot take less than" in done.stdout, done.stdout
    assert not Path(waits["group"]).exists(), f"the profiler left its cgroup {waits['group']}"


def test_mutation_smoke(untouched_repo, tmp_path):
    # A process of its own: the benchmark forks a child per mutant and works in a copy of the repository.
    done = run_benchmark("bench_mutation.py", tmp_path / "mutation")
    assert "| exit_codes | 6 |" in done.stdout and "6 mutants in" in done.stdout, done.stdout


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_run_action_smoke(untouched_repo):
    """Both contenders meet both commands: the bounded action's peak stays small while the seed's grows with
    the flood, and it neither waits for nor leaves behind the backgrounded sleep the seed leaves running."""
    from benchmarks import bench_run_action

    results = bench_run_action.main(["--smoke"])["results"]
    flood, background = results["flood"], results["background"]
    assert [len(flood[c]) for c in ("seed", "bounded")] == [len(background[c]) for c in ("seed", "bounded")] == [1, 1]
    [seed_flood], [bounded_flood] = flood["seed"], flood["bounded"]
    # How much `yes` writes in 1 s depends on the CPU the machine spares (CI's loaded run: ~29 MB), so
    # each peak is judged against the flood that contender met, not against a fixed size.
    # Growth is the child's peak (VmHWM, reset before the command) over its RSS before the command.
    mib = 1024 * 1024
    bounded_growth_kb = bounded_flood["maxrss_kb"] - bounded_flood["before_kb"]
    assert bounded_flood["output_bytes"] > 4 * mib and "did not finish within 1 s" in bounded_flood["summary"], bounded_flood
    assert bounded_growth_kb * 1024 < min(16 * mib, bounded_flood["output_bytes"] / 4), bounded_flood   # kept 64 KiB of it
    if seed_flood["summary"] != "MemoryError" and seed_flood["maxrss_kb"] is not None:   # else it kept all, to the limit
        assert seed_flood["output_bytes"] > 4 * mib, seed_flood
        seed_growth = (seed_flood["maxrss_kb"] - seed_flood["before_kb"]) * 1024
        assert seed_growth > 0.75 * seed_flood["output_bytes"], seed_flood   # it held every byte it read
    [seed_bg], [bounded_bg] = background["seed"], background["bounded"]
    assert seed_bg["left_running"] == 1 and "timed out" in seed_bg["summary"], seed_bg
    assert bounded_bg["left_running"] == 0 and bounded_bg["ok"] and "killed them" in bounded_bg["summary"], bounded_bg


# The smokes that train: latency, log flood, false alarms, chaos and overhead run their --smoke on the toy
# trainer (the engine's recovery, judgement and cost are the subject); relaunch and spare contention time
# litgpt's own relaunch and train it.
# RUNBOOK_BENCHMARK_SMOKE=0 leaves them out of a quick local run, and the end-of-run skip list says so.
TRAINING_SMOKE = pytest.mark.skipif(os.environ.get("RUNBOOK_BENCHMARK_SMOKE") == "0",
                                    reason="training benchmark smoke left out: RUNBOOK_BENCHMARK_SMOKE=0")


# --- subprocesses: real runs under `runbook watch` (litgpt, or the toy trainer where the engine is the subject) ---


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
@TRAINING_SMOKE
def test_chaos_smoke(untouched_repo, tmp_path):
    """--smoke runs the schedule on the toy trainer (the engine's recovery of each fault is the subject). The
    reference completes; runbook completes with the same steps and tokens after the schedule's incidents,
    each recovered; the naive loop starts at a micro-batch that fits (the OOM does not apply to it), meets
    the SIGTERM and stops at the hang it never notices; the assisted loop's human kills the hung trainer and
    it goes on to the corrupt checkpoint; the table says where each stopped."""
    done = run_benchmark("bench_chaos_repeat.py", tmp_path / "chaos")   # one run of bench_chaos.py --smoke
    assert json.loads((tmp_path / "chaos" / "run-1" / "memory.json").read_text())["trainer"] == "toy"
    outcomes = {o["name"][:4].rstrip(" "): o for o in json.loads((tmp_path / "chaos" / "run-1" / "results.json").read_text())}
    reference, runbook, naive, helped = outcomes["(a)"], outcomes["(b)"], outcomes["(c)"], outcomes["(c')"]
    assert reference["completed"] and reference["steps"] == 12, reference
    assert runbook["completed"], runbook
    assert (runbook["steps"], runbook["tokens"]) == (reference["steps"], reference["tokens"])
    assert [i.split(" (")[0] for i in runbook["incidents"]] == ["oom", "preemption", "hang", "corrupt-checkpoint"], runbook["incidents"]
    assert all(i.endswith("(recovered)") for i in runbook["incidents"]), runbook["incidents"]
    assert runbook["oom"] == "applied" and naive["oom"].startswith("does not apply"), (runbook["oom"], naive["oom"])
    assert not naive["completed"] and naive["injected"][:2] == ["SIGTERM", "SIGSTOP hang"], naive
    assert "hang (never detected)" in naive["incidents"] and not any("OOM" in i for i in naive["incidents"]), naive["incidents"]
    # its relaunch after the SIGTERM resumed (resume: auto) from the step the notice saved
    assert naive["incidents"][0].startswith("restart after") and naive["steps_lost"][0] == 0, naive
    assert helped["human_actions"] >= 1 and helped["injected"][:2] == ["SIGTERM", "SIGSTOP hang"], helped
    assert "| (b) runbook watch | yes | 12 |" in done.stdout
    assert "| contender | OOM at start | faults met | stopped at | what happened |" in done.stdout
    assert "| SIGTERM, SIGSTOP hang | SIGSTOP hang | hung: no progress" in done.stdout   # (c)
    assert "without the hang line" in done.stdout and "Observer.hang_timeout" in done.stdout
    # the repeat wrapper's table: one run agrees with itself, every contender listed
    agreement = json.loads((tmp_path / "chaos" / "agreement.json").read_text())
    assert [row["contender"][:4].rstrip(" ") for row in agreement["rows"]] == ["(a)", "(b)", "(c)", "(c')"], agreement
    assert all(row["agreed"] for row in agreement["rows"]) and "agreed in all 1 run(s): 4 of 4" in done.stdout


@TRAINING_SMOKE
def test_latency_smoke(untouched_repo, tmp_path):
    """--smoke runs on the toy trainer (the SIGKILL's detection and recovery are the engine's): one sigkill
    sample, recovered by the killed playbook, its figures in both tables, and the same row again from what
    the run kept (--report-from)."""
    done = run_benchmark("bench_latency.py", tmp_path / "latency")
    assert json.loads((tmp_path / "latency" / "run.json").read_text())["trainer"] == "toy"
    [result] = json.loads((tmp_path / "latency" / "results.json").read_text())
    assert result["class"] == "sigkill" and result["watch_exit"] == 0, result
    assert (result["playbook"], result["outcome"]) == ("killed", "recovered"), result
    assert result["runbook_s"] is not None and result["steps_lost"] is not None, result
    # exit_to_detected may be "-" on a loaded machine: the benchmark's pidfd thread can stamp the exit after
    # the watcher's detected_at; that is a figure, not an outcome
    assert "| sigkill |" in done.stdout and "Goals: crash-class faults detected" in done.stdout
    assert "Median / worst (samples) per fault class" in done.stdout and "first progress line" in done.stdout
    # the report again from what the run kept (results.json, run.json): the same table, nothing measured
    again = run_benchmark("bench_latency.py", tmp_path / "unused", "--report-from", str(tmp_path / "latency"))
    row = next(line for line in done.stdout.splitlines() if line.startswith("| sigkill | 1 |"))
    assert row in again.stdout.splitlines() and not (tmp_path / "unused").exists()


@TRAINING_SMOKE
def test_relaunch_and_spare_contention_smoke(untouched_repo, tmp_path, litgpt_data):
    """bench_relaunch trains a 4-step litgpt run and times a cold and a warm relaunch from its step 2;
    bench_spare_contention reuses the run (--smoke on the same --root) for a warm relaunch alone and one beside
    a spare's imports at nice +10."""
    done = run_benchmark("bench_relaunch.py", tmp_path / "relaunch", env=litgpt_data)
    samples = json.loads((tmp_path / "relaunch" / "results.json").read_text())
    assert len(samples["cold"]) == len(samples["warm"]) == 1
    assert all("first optimizer step done" in s for s in samples["cold"] + samples["warm"])
    assert "warm: relaunch begins" in samples["warm"][0] and "warm: relaunch begins" not in samples["cold"][0]
    assert "relaunch -> first new optimizer step (progress = the first optimizer step done" in done.stdout
    cold_s, warm_s = (samples[mode][0]["first optimizer step done"] for mode in ("cold", "warm"))
    assert f"cold median {cold_s:.2f} s, worst {cold_s:.2f} s; warm spare median {warm_s:.2f} s" in done.stdout
    contended = run_benchmark("bench_spare_contention.py", tmp_path / "relaunch", env=litgpt_data)
    contention = json.loads((tmp_path / "relaunch" / "results.json").read_text())
    assert set(contention) == {"alone", "beside a spare's imports at nice +10"}
    assert all(len(v) == 1 and v[0] > 0 for v in contention.values())
    alone, beside = contention["alone"][0], contention["beside a spare's imports at nice +10"][0]
    assert f"| alone | {alone:.2f} | 1.00x |" in contended.stdout, contended.stdout
    assert f"| beside a spare's imports at nice +10 | {beside:.2f} | {beside / alone:.2f}x |" in contended.stdout


@TRAINING_SMOKE
def test_overhead_smoke(untouched_repo, tmp_path):
    """--smoke runs on the toy trainer (the harness is the subject: the pair, the line clock, the CPU read from
    unreaped processes, the watcher paused in blocks): both sides train every step, the watched side's
    watcher CPU is read, one alternating run, the report."""
    done = run_benchmark("bench_overhead.py", tmp_path / "overhead")
    results = json.loads((tmp_path / "overhead" / "results.json").read_text())
    assert results["trainer"] == "toy", results
    [pair] = results["pairs"]
    assert pair["bare"]["steps"] == pair["watched"]["steps"] == 16, pair
    assert pair["bare"]["tokens_per_s"] > 0 and pair["watched"]["tokens_per_s"] > 0
    assert pair["watched"]["watcher_cpu_s"] is not None
    assert len(results["alternating"]) == 1
    assert "Separate runs: median watched/bare throughput ratio" in done.stdout
    row = next(line for line in done.stdout.splitlines() if line.startswith("| 1 (bare first) |")).split(" | ")
    assert abs(float(row[3]) - pair["watched"]["tokens_per_s"] / pair["bare"]["tokens_per_s"]) <= 0.0005, row


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
@TRAINING_SMOKE
def test_log_flood_smoke(untouched_repo, tmp_path):
    """--smoke floods the log of a toy-trainer run (the watcher is the subject): the watcher survives each
    phase and its heartbeat catches up with the log's newest progress line after each."""
    run_benchmark("bench_log_flood.py", tmp_path / "flood")
    results = json.loads((tmp_path / "flood" / "results.json").read_text())
    assert results["alive"] and results["trainer"] == "toy", results
    assert [p["phase"].split(":")[0] for p in results["phases"]] == ["quiet (training only)", "flood", "huge line"]
    assert all(p["caught_up_s"] is not None for p in results["phases"]), results["phases"]


@TRAINING_SMOKE
def test_false_alarms_smoke(untouched_repo, tmp_path):
    """One undisturbed toy-trainer run (--smoke's: the watcher's judgement is the subject) beside the busy
    loops: it completes all its steps with no spurious incident (the benchmark's goal), each incident is
    classified, the busy loops are gone afterwards."""
    done = run_benchmark("bench_false_alarms.py", tmp_path / "false-alarms")
    results = json.loads((tmp_path / "false-alarms" / "results.json").read_text())
    [run] = results["runs"]
    assert results["trainer"] == "toy" and run["steps"] == results["steps"] == 12, (results["trainer"], run)
    assert run["completed"] and run["watch_exit"] == 0, run
    assert run["spurious"] == sum(i["spurious"] for i in run["incidents"]), run
    # the toy's steps are paced sleeps: the busy loop cannot slow them, so any spurious incident is the watcher's
    assert run["spurious"] == 0 and "goal 0: met" in done.stdout, run["incidents"]
    assert all(i["why"] for i in run["incidents"]), run["incidents"]
    assert results["busy"] >= 1 and "busy loop" in results["contention"], results
    assert "spurious incidents:" in done.stdout and "| run | wall s | completed |" in done.stdout


@TRAINING_SMOKE
def test_litgpt_saves_smoke(untouched_repo, tmp_path, litgpt_data):
    """bench_litgpt_saves trains a 4-step litgpt run (a checkpoint every 2: 3 saves) once each way; both ways'
    hyperparameters.yaml files are byte-equal (checked inside), and the report is of the samples taken."""
    done = run_benchmark("bench_litgpt_saves.py", tmp_path / "saves", env=litgpt_data)
    results = json.loads((tmp_path / "saves" / "results.json").read_text())
    assert results["saves"] == 3, results
    WAYS = ("parsed once (runbook's entry)", "litgpt's re-parse at every save")
    once, reparse = (results[way] for way in WAYS)
    assert len(once) == len(reparse) == 1 and once[0][0] > 0 and reparse[0][0] > 0
    assert f"| parsed once (runbook's entry) | 1 | {once[0][0]:.2f} |" in done.stdout, done.stdout
    # the entry's parse_once in use (deleting its call leaves no meter: parses [0]), and the direction of the figure:
    # the hyperparameters step of 3 saves costs less parsed once than re-parsed (0.9 CPU s per parse, copies ~ms)
    assert results["parses"] == {WAYS[0]: [1], WAYS[1]: [3]}, results
    step = results["hyperparameters step CPU s"]
    assert step[WAYS[1]] > 1.5 * step[WAYS[0]] > 0, step


def test_multirank_smoke(tmp_path):
    """runbook under torchrun with a SIGKILLed rank (benchmarks/bench_multirank.py --smoke): completed, and
    the row says so with the incident that recovered it."""
    done = run_benchmark("bench_multirank.py", tmp_path / "multirank")
    assert "runbook x sigkill #1: completed True" in done.stdout, done.stdout
    assert "| runbook | sigkill | 1/1 |" in done.stdout and "rank-died -> recovered" in done.stdout
