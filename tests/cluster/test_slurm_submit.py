"""`runbook slurm submit` under a real SLURM (tests/slurm_cluster.py starts a one-host cluster): two jobs at
once, each stopped once in its first allocation, each finishing in a later one with the budget's exact counts.
The jobs run the toy trainer (tests/toy_trainer/): the subject is runbook's SLURM notice, save and requeue, not
litgpt (its notice save is tests/litgpt/'s; several ranks in a job, tests/cluster/test_slurm_ranks.py).

- job A: `scancel --signal=TERM --full` after its first checkpoint. The SIGTERM reaches every process of
  the batch step: the watcher (the batch shell: the script execs `runbook watch`) and the trainer, which
  saves on it; the watcher's forwarded notice finds it saving. scontrol shows the job running, no
  preemption, no time limit near: cause "signal". The trainer's save exits 75 and the watcher requeues
  its own job; the next allocation resumes from that save. (Without -b/-f, `scancel --signal` signals
  only job steps, and this job has none but the batch step: nothing arrives.)
- job B: submitted with `--time=1` and a 15 s signal lead; SLURM's warning SIGTERM comes 15-45 s into the
  allocation (its limit check runs every 30 s and signals up to 30 s early). The test SIGSTOPs B's trainer
  after its first checkpoint, so that the warning finds the run mid-way on any machine; the watcher
  SIGCONTs it with the notice. Cause "time-limit"; the trainer saves, the watcher requeues the job, and
  the test gives the pending job a longer limit so that its next allocation finishes (on a real cluster
  each allocation is long; a 1-minute one is only this test's).

A's trainer is held the same way until its signal is sent, so that however fast the toy runs, the signal
finds it mid-way. No second undisturbed run: the budget says the counts (20480 tokens / (16 x 64) = 20
steps), and the toy's own steps replayed from scratch say the final weights, bit for bit (a notice save or a
resume that mixed up a step's state across the requeue would change them).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from engine.cluster.slurm_records import read_allocations
from engine.observe.events import Progress
from engine.trainers.run_config import load_config
from tests.conftest import REPO, RUNBOOK, Project, make_toy_project
from tests.toy_trainer.adapter import ToyAdapter
from tests.slurm_cluster import start_cluster, stop_cluster


# The submit itself reads only the run config: the tests of the submit alone (a dry run, a refusal, a held job)
# use the toy trainer's project, whose config imports the toy's adapter from this repository.
TOY_ENV = {**os.environ, "PYTHONPATH": str(REPO)}


FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    started = time.monotonic()
    cluster = start_cluster(tmp_path_factory.mktemp("slurm-submit"))
    cluster.start_seconds = time.monotonic() - started
    yield cluster
    stop_cluster(cluster)


def submit(cluster, project, *options: str, env: dict | None = None) -> str:
    done = subprocess.run([RUNBOOK, "slurm", "submit", str(project.config), *options], env=env or cluster.env,
                          cwd=project.root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip().isdigit(), done.stdout + done.stderr
    return done.stdout.strip()


def job_output(project, job_id: str) -> str:
    path = project.run_dir / "slurm" / f"job-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else "(no job output)"


def journal(project) -> list[dict]:
    return [json.loads(line) for line in (project.run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]


# The budget: 20 steps of the toy, a checkpoint every 5, half a second a step (so a step is in progress when a
# notice comes, and the next allocation finishes in seconds).
STEPS, SAVE_INTERVAL = 20, 5


def toy_job_project(root: Path, **updates) -> Project:
    return make_toy_project(root, step_seconds=0.5, save_interval=SAVE_INTERVAL, max_tokens=STEPS * 16 * 64, **updates)


def toy_slurm_env(cluster) -> dict:
    """The cluster's environment with this repository on PYTHONPATH: a job gets the submitter's environment
    (sbatch --export=ALL), and its watcher imports the toy's adapter from here."""
    return {**cluster.env, "PYTHONPATH": TOY_ENV["PYTHONPATH"]}


def hold(project) -> None:
    """SIGSTOP the trainer: it cannot finish before the notice comes, however fast this machine runs it (the
    watcher SIGCONTs it with the notice it forwards)."""
    os.kill(project.trainer_pid(), signal.SIGSTOP)


@pytest.fixture(scope="module")
def runs(slurm, tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm-runs")
    cancelled = toy_job_project(root / "cancelled")
    # B's hang timeout outlasts its 1-minute allocation: the test holds its trainer stopped (below)
    timed_out = toy_job_project(root / "timed-out", slurm={"signal_lead_s": 15},
                                watch={"grace_period_s": 8.0, "hang_floor_s": 300.0, "hang_timeout_s": 300.0})
    env = toy_slurm_env(slurm)
    started = time.monotonic()
    job_a = submit(slurm, cancelled, env=env)
    job_b = submit(slurm, timed_out, "--time=1", env=env)
    # A second submit of A's run while A is pending or running: refused, nothing queued (asserted below)
    second = subprocess.run([RUNBOOK, "slurm", "submit", str(cancelled.config)], env=env, cwd=cancelled.root,
                            capture_output=True, text=True, timeout=60)
    queued = slurm.run("squeue", "-h", "-o", "%i").stdout.split()

    # Both jobs at once. A: held at its first checkpoint, then signalled. B: its trainer is held at its first
    # checkpoint unless the notice came already, so that the run is mid-way when SLURM's warning comes;
    # once that allocation requeued the job, the pending job gets a limit its next allocation can finish in.
    signalled = held = extended = False
    deadline = time.monotonic() + 300
    while not (signalled and extended):
        assert time.monotonic() < deadline, ("A signalled" if signalled else "A's first checkpoint never came",
                                             "B extended" if extended else "B was never requeued",
                                             job_output(cancelled, job_a), job_output(timed_out, job_b))
        if not signalled and cancelled.saved(SAVE_INTERVAL):
            hold(cancelled)
            done = slurm.run("scancel", "--signal=TERM", "--full", job_a)
            assert done.returncode == 0, done.stderr
            signalled = True
        if not held and timed_out.saved(SAVE_INTERVAL):
            held = True
            if not any(e["kind"] == "slurm_notice" for e in journal(timed_out)):
                hold(timed_out)
        if not extended:
            job = slurm.job(int(job_b))
            if job.get("JobState") == "PENDING" and int(job["Restarts"]):
                done = slurm.run("scontrol", "update", f"JobId={job_b}", "TimeLimit=10")
                assert done.returncode == 0, done.stderr
                extended = True
        time.sleep(0.3)

    jobs = {name: slurm.wait_job(int(job_id), FINISHED, timeout=400)
            for name, job_id in (("cancelled", job_a), ("timed-out", job_b))}
    return {"cancelled": (cancelled, job_a), "timed-out": (timed_out, job_b), "jobs": jobs,
            "second_submit": second, "queued_after_second": queued,
            "seconds": time.monotonic() - started, "cluster_start_seconds": slurm.start_seconds}


def undisturbed_final_state(project) -> dict:
    """The toy's own steps from scratch to the budget: what a run that lost no step and computed none twice
    ends with, bit for bit."""
    from tests.toy_trainer import trainer as toy

    cfg = load_config(project.config).config
    state = toy.initial_state(cfg.seed)
    for _ in range(STEPS):
        toy.train_step(state, cfg.lr)
    return state


@pytest.mark.parametrize("name,cause", [("cancelled", "signal"), ("timed-out", "time-limit")])
def test_a_stopped_slurm_job_requeues_itself_and_finishes_with_the_budgets_counts(runs, name, cause):
    project, job_id = runs[name]
    job = runs["jobs"][name]
    output = job_output(project, job_id)
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", (job, output)
    assert int(job["Restarts"]) >= 1, job
    # the budget's steps, exactly, and the undisturbed run's weights
    assert project.final_progress() == {"step_count": STEPS}, (project.final_progress(), output)
    assert project.final_state() == undisturbed_final_state(project), output

    # the watcher asked scontrol why, recorded it, and requeued its own job after the save
    entries = journal(project)
    notices = [e for e in entries if e["kind"] == "slurm_notice"]
    assert notices and notices[0]["cause"] == cause and notices[0]["requeue"] is True, notices
    assert any(e["kind"] == "slurm_requeue" for e in entries)
    noticed = [e for e in entries if e["kind"] == "trainer_noticed"]
    assert noticed and "exited 75" in noticed[0]["detail"], noticed   # the trainer saved on the notice
    launches = [e for e in entries if e["kind"] == "launch"]
    # The later allocation resumed from the notice's save, unless the notice came before the first launch
    # trained a step (a 1-minute allocation warned at 15 s, on a machine slow enough that the trainer was
    # still starting up): then there was nothing to save, and the next allocation starts from scratch.
    first_log = Path(launches[0]["log"]).read_text(errors="replace") if launches else ""
    trained = any(isinstance(ToyAdapter().parse_line(line), Progress) for line in first_log.splitlines())
    if trained:
        assert launches[-1].get("resume_from"), launches

    allocations, problems = read_allocations(project.run_dir)
    assert not problems
    assert [a.restart for a in allocations] == list(range(int(job["Restarts"]) + 1)), allocations
    assert {a.job_id for a in allocations} == {job_id}
    first, last = allocations[0], allocations[-1]
    assert first.notice_cause == cause and first.requeued and first.ended == f"requeued after a {cause} notice"
    assert last.ended == "completed" and not last.requeued and last.ended_at >= last.started_at
    assert "allocation 0 on" in output and "allocation 1 on" in output, output

    # `runbook status` shows the job id and every allocation
    status = subprocess.run([RUNBOOK, "status", str(project.config)], capture_output=True, text=True, timeout=60,
                            env=TOY_ENV)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"slurm     job {job_id}" in status.stdout, status.stdout
    for a in allocations:
        assert f"job {job_id} restart {a.restart} on {a.node}:" in status.stdout, status.stdout
    assert f"requeued after a {cause} notice" in status.stdout
    as_json = json.loads(subprocess.run([RUNBOOK, "status", "--json", str(project.config)], capture_output=True,
                                        text=True, timeout=60, env=TOY_ENV).stdout)
    assert as_json["slurm"]["job_id"] == job_id and len(as_json["slurm"]["allocations"]) == len(allocations)
    print(f"{name}: {runs['seconds']:.0f} s for both jobs; cluster started in {runs['cluster_start_seconds']:.1f} s")


def test_a_second_submit_is_refused_while_the_runs_job_is_live_and_not_once_it_ended(runs, slurm, tmp_path):
    project, job_a = runs["cancelled"]
    second = runs["second_submit"]
    assert second.returncode == 5, second.stdout + second.stderr   # ExitCode.LOCKED, as `runbook watch`'s
    assert not second.stdout.strip(), second.stdout                  # no job id: nothing submitted
    assert re.search(rf"job {job_a} of this run is still (PENDING|CONFIGURING|RUNNING)", second.stderr), second.stderr
    assert f"scancel {job_a}" in second.stderr, second.stderr
    print(second.stderr.strip())
    assert sorted(runs["queued_after_second"]) == sorted([job_a, runs["timed-out"][1]]), runs["queued_after_second"]
    assert json.loads((project.run_dir / "slurm" / "submission.json").read_text())["job_id"] == job_a

    # Records that name only ended or unknown jobs (A completed; 999999 never existed): submitted. Held, and
    # cancelled at once: only the submit itself is under test.
    from engine.cluster.slurm_records import Allocation, Submission, write_allocation, write_submission

    other = make_toy_project(tmp_path / "project")
    run_dir = other.run_dir
    write_allocation(run_dir, Allocation(job_id=job_a, restart=0, node="vm", started_at=time.time() - 60,
                                         watcher_pid=1, ended_at=time.time() - 30, ended="completed"))
    write_submission(run_dir, Submission(job_id="999999", submitted_at=time.time() - 90, script="x", argv=[]))
    done = subprocess.run([RUNBOOK, "slurm", "submit", str(other.config), "--hold", "--job-name=runbook-resubmit"],
                          env={**slurm.env, "PYTHONPATH": TOY_ENV["PYTHONPATH"]}, cwd=other.root,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip().isdigit(), done.stdout + done.stderr
    assert slurm.run("scancel", done.stdout.strip()).returncode == 0
    assert "warning" not in done.stderr, done.stderr   # an unknown job is an answer, not a failure to ask


def test_dry_run_prints_the_script_and_submits_nothing(tmp_path, slurm):
    project = make_toy_project(tmp_path / "project", slurm={"signal_lead_s": 120, "partition": "debug"})
    done = subprocess.run([RUNBOOK, "slurm", "submit", "--dry-run", str(project.config), "--time=30"],
                          env={**slurm.env, "PYTHONPATH": TOY_ENV["PYTHONPATH"]}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    for line in ("#SBATCH --requeue", "#SBATCH --signal=B:TERM@120", "#SBATCH --open-mode=append",
                 f"#SBATCH --output={project.run_dir}/slurm/job-%j.out", "#SBATCH --partition=debug",
                 "# would run: sbatch --parsable --time=30"):
        assert line in done.stdout, done.stdout
    # The runbook beside the interpreter that runs it (the same file as this suite's, by whatever path).
    [step] = [line.split() for line in done.stdout.splitlines() if line.startswith("exec ")]
    assert step[2:] == ["watch", str(project.config)] and os.path.samefile(step[1], RUNBOOK), done.stdout
    assert not (project.run_dir / "slurm").exists()
    queue = slurm.run("squeue", "-h", "-o", "%i %j")
    assert "runbook-pretrain" not in queue.stdout, queue.stdout


def test_a_signal_lead_shorter_than_the_grace_period_is_refused(tmp_path):
    project = make_toy_project(tmp_path / "project", slurm={"signal_lead_s": 5})
    done = subprocess.run([RUNBOOK, "slurm", "submit", "--dry-run", str(project.config)],
                          capture_output=True, text=True, timeout=60, env=TOY_ENV)
    assert done.returncode == 3 and "signal_lead_s (5 s) must exceed watch.grace_period_s (10 s)" in done.stderr, done


def test_a_second_config_is_not_passed_to_sbatch_as_its_script(tmp_path):
    project = make_toy_project(tmp_path / "project")
    done = subprocess.run([RUNBOOK, "slurm", "submit", "--dry-run", str(project.config), "-p", "debug", "other.yaml"],
                          capture_output=True, text=True, timeout=60, env=TOY_ENV)
    assert done.returncode == 2 and "'other.yaml' is neither an sbatch option" in done.stderr, done


# --- the pure part (engine/cluster/slurm.py): no cluster -------------------------------------------------------
# `scontrol show job -o` lines as SLURM 22.05 printed them for this file's jobs (cut to the fields read).
RUNNING_UNLIMITED = ("JobId=1 JobName=runbook-pretrain UserId=root(0) JobState=RUNNING Reason=None Requeue=1 "
                     "Restarts=0 BatchFlag=1 ExitCode=0:0 RunTime=00:00:13 TimeLimit=UNLIMITED TimeMin=N/A "
                     "StartTime=2026-11-30T14:47:37 EndTime=Unknown NodeList=vm BatchHost=vm NumNodes=1")
RUNNING_LIMITED = RUNNING_UNLIMITED.replace("RunTime=00:00:13 TimeLimit=UNLIMITED", "RunTime=00:00:24 TimeLimit=00:01:00")


def test_the_notice_cause_is_read_from_scontrols_view_of_the_job():
    from engine.cluster.slurm import classify_notice, job_view, parse_show_job, should_requeue

    def cause(line: str, lead: float = 15) -> str:
        return classify_notice(job_view(parse_show_job(line)), lead)[0]

    assert cause(RUNNING_UNLIMITED) == "signal"
    assert cause(RUNNING_LIMITED) == "time-limit"                       # 36 s left, lead 15 + 60 s slack
    assert cause(RUNNING_LIMITED.replace("TimeLimit=00:01:00", "TimeLimit=2-00:00:00")) == "signal"
    assert cause(RUNNING_UNLIMITED + " PreemptTime=2026-11-30T14:48:00") == "preemption"
    assert cause(RUNNING_UNLIMITED.replace("JobState=RUNNING", "JobState=CANCELLED")) == "cancelled"
    # an outside `scontrol requeue` TERMs the watcher while scontrol says COMPLETING (measured): no second requeue
    assert cause(RUNNING_UNLIMITED.replace("JobState=RUNNING", "JobState=COMPLETING")) == "requeued"
    assert not should_requeue("requeued", ["time-limit", "preemption", "signal"])
    assert classify_notice(None, 15)[0] == "unknown"
    assert job_view(parse_show_job("slurm_load_jobs error: Invalid job id specified")) is None
    view = job_view(parse_show_job(RUNNING_LIMITED))
    assert (view.node, view.restarts, view.run_time_s, view.time_limit_s) == ("vm", 0, 24, 60)
    # a plain scancel means "gone for good"; every cause that means "yield the node" requeues by default
    assert not should_requeue("cancelled", ["time-limit", "preemption", "signal"])
    assert not should_requeue("unknown", ["time-limit", "preemption", "signal"])
    assert should_requeue("preemption", ["preemption"]) and not should_requeue("signal", ["preemption"])
    everything = ["time-limit", "preemption", "signal"]
    assert not should_requeue("signal", everything, stop_signal="SIGINT")   # Ctrl-C: a person stopping it
    interactive = job_view(parse_show_job(RUNNING_LIMITED.replace("BatchFlag=1", "BatchFlag=0")))
    assert not should_requeue("time-limit", everything, interactive)      # salloc/srun: SLURM cannot requeue it
    assert should_requeue("time-limit", everything, view)


def test_slurm_durations_and_sacct_rows():
    from engine.cluster.slurm import parse_duration, parse_job_id, parse_sacct, previous_ending

    assert [parse_duration(t) for t in ("5", "02:30", "01:00:00", "1-02:00:00", "2-03", "UNLIMITED", "")] == \
        [300, 150, 3600, 93600, 183600, None, None]
    rows = parse_sacct("7|NODE_FAIL|2026-11-30T10:00:00|2026-11-30T10:05:00|n1|0:0\n"
                       "7|RUNNING|2026-11-30T10:06:00|Unknown|n2|0:0\n")
    assert previous_ending(rows, None) == "NODE_FAIL" and previous_ending([], None) is None
    assert parse_job_id("42;cluster\n") == "42" and parse_job_id("42\n") == "42" and parse_job_id("") is None
    assert parse_job_id("sbatch: error: Batch job submission failed") is None


def test_bad_slurm_settings_are_refused_with_the_key():
    from pydantic import ValidationError

    from engine.cluster.slurm import SlurmSettings
    from runbook.commands.slurm_cmd import stray_word

    for bad in ({"time": "tomorrow"}, {"partition": "debug; rm -rf /"}, {"sbatch_options": ["--mem=1G\nrm x"]},
                {"sbatch_options": ["mem=1G"]}, {"signal_lead_s": 0}, {"requeue_on": ["cancelled"]}, {"nodes": 2}):
        with pytest.raises(ValidationError):
            SlurmSettings.model_validate(bad)
    assert SlurmSettings.model_validate({"time": "1-00:00:00", "partition": "gpu"}).time == "1-00:00:00"
    assert stray_word(["--time=5", "-p", "debug", "--mem", "4G"]) is None
    assert stray_word(["-p", "debug", "b.yaml"]) == "b.yaml" and stray_word(["b.yaml"]) == "b.yaml"


def test_an_allocation_that_never_recorded_its_end_is_closed_by_the_next_one(tmp_path):
    """A node failure sends the watcher nothing: its allocation record has no end. The next allocation's
    watcher closes it, saying so (and what sacct says where the cluster keeps accounting; here it does not)."""
    from engine.records.journal import Journal
    from engine.cluster.slurm_records import Allocation, write_allocation
    from engine.cluster.slurm_watch import SlurmAllocation

    project = make_toy_project(tmp_path / "project")
    loaded = load_config(project.config)
    write_allocation(loaded.run_dir, Allocation(job_id="7", restart=0, node="n1", started_at=time.time() - 60,
                                                watcher_pid=1))
    journal_file = Journal(loaded.folder.journal)
    SlurmAllocation(loaded, journal_file, "7", 1).started()

    allocations, problems = read_allocations(loaded.run_dir)
    assert not problems and [a.restart for a in allocations] == [0, 1]
    lost, current = allocations
    assert lost.ended.startswith("ended without a word from its watcher") and lost.ended_at == current.started_at
    assert current.ended is None and current.job_id == "7"
    kinds = [e["kind"] for e in journal(project)]
    assert kinds == ["slurm_allocation_lost", "slurm_allocation"], kinds
    status = subprocess.run([RUNBOOK, "status", str(project.config)], capture_output=True, text=True, timeout=60, env=TOY_ENV)
    assert "job 7 restart 0 on n1:" in status.stdout and "ended without a word" in status.stdout, status.stdout


def test_a_project_path_an_sbatch_line_cannot_carry_is_refused(tmp_path):
    project = make_toy_project(tmp_path / "with blank" / "project")
    done = subprocess.run([RUNBOOK, "slurm", "submit", "--dry-run", str(project.config)],
                          capture_output=True, text=True, timeout=60, env=TOY_ENV)
    assert done.returncode == 3 and "has a blank or '%' in its path" in done.stderr, done
