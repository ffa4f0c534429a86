"""Hostile input, round two, on the command line (issue 26 items 5, 8, 9, 10): every reproduction is a case.

Deep or malformed JSON in any run-folder file is reported and skipped; a malformed outbox message is set
aside and the notices behind it are delivered; an unloadable tokenizer.json is one sentence; output works
with any COLUMNS and on an ASCII-only stdout; a stale pid in watch.lock is called stale; `watch --dry-run`
never says "pid None"; `init --from-litgpt` says where the data folders it writes resolve.

Real files in tmp_path; the run folder is test_report_status's finished run. Commands run in process
through typer's CliRunner, except where the process's own environment is the point (COLUMNS,
PYTHONIOENCODING): those run as subprocesses, several at a time.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runbook.cli import app
from tests.conftest import REPO, RUNBOOK
from tests.fake_slack import FakeSlack
from tests.unit.test_report_status import finished_run  # noqa: F401  (the fixture)


runner = CliRunner()
TOKEN_ENV = "RB_HOSTILE_TOKEN"

DEEP = {   # each once as the whole file: the JSON parser's RecursionError, or nesting past what any reader expects
    "list-100k": "[" * 100_000 + "]" * 100_000,
    "object-100k": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "list-200": "[" * 200 + "]" * 200,   # parses; 200 levels is no record of ours
}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def slack():
    with FakeSlack() as fake:
        yield fake


def with_slack(config: Path, slack: FakeSlack) -> None:
    config.write_text(config.read_text() + (
        "notifications:\n  slack:\n    enabled: true\n    channel: '#training'\n"
        f"    base_url: {slack.api_base}\n    bot_token_env: {TOKEN_ENV}\n    timeout_s: 1.0\n    delivery_timeout_s: 3.0\n"))


def invoke(*args: str):
    result = runner.invoke(app, list(args), env={TOKEN_ENV: "xoxb-hostile-test"})
    text = result.output + (getattr(result, "stderr", "") if result.stderr_bytes is not None else "")
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, text, result.exception)
    assert "Traceback" not in text and "RecursionError" not in text, (args, text)
    return result.exit_code, text


def message(text: str = "hello", **fields) -> dict:
    return {"kind": "digest", "incident_id": "digest", "text": text, "blocks": None, "broadcast": False,
            "queued_at": 1_790_000_000.0, **fields}


def project_of(config: Path) -> tuple[Path, Path, Path]:
    root = config.parent.parent
    return root, root / "runs" / "pretrain", root / "checkpoints" / "pretrain"


# --- deep JSON in every run-folder file a command reads ---------------------------------------------------
# (file, command, expected exit): the file is named in the output, the command does what it does anyway.
DEEP_TARGETS = {
    "heartbeat": ("runs/pretrain/heartbeat.json", [("status", "{config}"), ("status", "{config}", "--json")], {0}),
    "manifest": ("checkpoints/pretrain/step-00000100/runbook-manifest.json", [("verify", "{out_dir}")], {8}),
    "outbox-status": ("runs/pretrain/outbox/000000000001.json", [("status", "{config}"), ("notify", "{config}")], {0}),
    "incident": ("runs/pretrain/incidents/incident-2.json",
                 [("incidents", "--config", "{config}"), ("incidents", "show", "incident-2", "--config", "{config}")], {9}),
    "incident-status": ("runs/pretrain/incidents/incident-2.json", [("status", "{config}")], {0}),
    "exit-status": ("runs/pretrain/launches/launch-003/exit-status.json", [("status", "{config}")], {0}),
    "slurm-submission": ("runs/pretrain/slurm/submission.json", [("status", "{config}")], {0}),
    "slurm-allocation": ("runs/pretrain/slurm/allocation-7-0.json", [("status", "{config}")], {0}),
}


@pytest.mark.parametrize("shape", sorted(DEEP))
@pytest.mark.parametrize("target", sorted(DEEP_TARGETS))
def test_deep_json_in_a_run_folder_file_is_reported_and_skipped(finished_run, target, shape):
    root, run_dir, out_dir = project_of(finished_run)
    relative, commands, codes = DEEP_TARGETS[target]
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DEEP[shape])
    for command in commands:
        args = [a.format(config=finished_run, out_dir=out_dir) for a in command]
        code, text = invoke(*args)
        assert code in codes, (args, code, text)
        if target == "manifest":
            assert "step-00000100" in text and "CORRUPT" in text and "nested" in text.replace("\n", " ")
        if target.startswith("incident"):
            assert "incident-2.json" in text.replace("\n", "") and "nested" in text.replace("\n", " ")


@pytest.mark.parametrize("shape", sorted(DEEP))
@pytest.mark.parametrize("where", ["message", "state"])
def test_deep_json_in_the_outbox_never_stops_delivery(finished_run, slack, shape, where):
    """`notify --flush` and a `watch` of the completed run deliver what can be delivered; the deep message
    is set aside in outbox/failed/ with its reason."""
    with_slack(finished_run, slack)
    _, run_dir, _ = project_of(finished_run)
    outbox = run_dir / "outbox"
    outbox.mkdir()
    if where == "message":
        (outbox / "000000000001.json").write_text(DEEP[shape])
        (outbox / "000000000002.json").write_text(json.dumps(message("after the deep one")))
    else:
        (outbox / "state.json").write_text(DEEP[shape])
        (outbox / "000000000001.json").write_text(json.dumps(message("with a deep state")))
    code, text = invoke("status", str(finished_run))
    assert code == 0 and "pending" in text
    code, text = invoke("notify", str(finished_run), "--flush")
    assert code == 0, text
    assert [r.body["text"] for r in slack.delivered()] == ["after the deep one" if where == "message" else "with a deep state"]
    if where == "message":
        assert (outbox / "failed" / "000000000001.json").read_text() == DEEP[shape]
        assert "nested" in (outbox / "failed" / "000000000001.reason.txt").read_text()
    # and once more through `watch` on the completed run
    (outbox / "000000000005.json").write_text(DEEP[shape])
    (outbox / "000000000006.json").write_text(json.dumps(message("through watch")))
    code, text = invoke("watch", str(finished_run))
    assert code == 0 and "already completed" in text, text
    assert slack.delivered()[-1].body["text"] == "through watch"
    assert not list(outbox.glob("*.json")) or [p.name for p in outbox.glob("*.json")] == ["state.json"]


# --- one malformed message used to block every notice behind it -------------------------------------------
MALFORMED = {
    "empty-object": {},
    "no-text": {k: v for k, v in message().items() if k != "text"},
    "text-number": message(text=5),
    "text-empty": message(text="  "),
    "kind-unknown": message(kind="shout"),
    "incident-id-list": message(incident_id=[1]),
    "blocks-string": message(blocks="nope"),
    "blocks-of-numbers": message(blocks=[1, 2]),
    "broadcast-string": message(broadcast="yes"),
    "a-list": [1, 2, 3],
    "a-string": "text",
    "null": None,
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_message_is_set_aside_and_the_rest_are_delivered(finished_run, slack, name):
    with_slack(finished_run, slack)
    _, run_dir, _ = project_of(finished_run)
    outbox = run_dir / "outbox"
    outbox.mkdir()
    (outbox / "000000000001.json").write_text(json.dumps(MALFORMED[name]))
    for n, text in enumerate(("first good", "second good"), start=2):
        (outbox / f"{n:012d}.json").write_text(json.dumps(message(text)))
    code, text = invoke("notify", str(finished_run), "--flush")
    assert code == 0, text
    assert "delivered 2 notice(s)" in text and "KeyError" not in text
    assert [r.body["text"] for r in slack.delivered()] == ["first good", "second good"]
    assert json.loads((outbox / "failed" / "000000000001.json").read_text()) == MALFORMED[name]
    assert (outbox / "failed" / "000000000001.reason.txt").read_text().startswith("malformed: ")
    code, text = invoke("status", str(finished_run))
    assert code == 0 and "1 set aside in an outbox's failed/" in text


# --- an unloadable tokenizer.json: scan-data says what check says ------------------------------------------
def tokenizer_cases(tmp_path: Path) -> dict[str, Path]:
    tmp_path.mkdir()
    cases = {}
    for name, text in {"empty": "", "garbage": "garbage{{\x01", "deep-100k": DEEP["list-100k"],
                       "deep-object": DEEP["object-100k"], "json-not-a-tokenizer": '{"a": 1}'}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "tokenizer.json").write_text(text)
        cases[name] = tmp_path / name
    huge = tmp_path / "huge.bin"
    with open(huge, "wb") as fh:   # sparse: 300 MB that take no disk
        fh.truncate(300 * 1024 * 1024)
    (tmp_path / "symlink-huge").mkdir()
    (tmp_path / "symlink-huge" / "tokenizer.json").symlink_to(huge)
    (tmp_path / "symlink-nowhere").mkdir()
    (tmp_path / "symlink-nowhere" / "tokenizer.json").symlink_to(tmp_path / "missing")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "tokenizer.json").mkdir()
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "tokenizer.json")
    return {**cases, "symlink-huge": tmp_path / "symlink-huge", "symlink-nowhere": tmp_path / "symlink-nowhere",
            "folder": tmp_path / "folder", "fifo": tmp_path / "fifo"}


TOKENIZER_CASES = ["deep-100k", "deep-object", "empty", "fifo", "folder", "garbage", "json-not-a-tokenizer",
                   "symlink-huge", "symlink-nowhere"]


@pytest.mark.parametrize("case", TOKENIZER_CASES)
def test_scan_data_with_an_unloadable_tokenizer_is_the_sentence_check_says(tmp_path, case):
    from engine.trainers.litgpt.preflight import tokenizer_problems

    folder = tokenizer_cases(tmp_path / "tok")[case]
    text_file = tmp_path / "train.txt"
    text_file.write_text("hello world\n")
    code, text = invoke("scan-data", str(text_file), "--tokenizer", str(folder))
    assert code == 3, text
    said = " ".join(text.split())
    if case not in ("fifo", "folder", "symlink-nowhere"):   # check says "no tokenizer.json" for those without reading
        [check_says] = tokenizer_problems(folder, needs_bos=False, vocab_limit=None)
        assert " ".join(check_says.split()) in said
    assert said.count("tokenizer.json") >= 1 and len(text.strip().splitlines()) <= 4


# --- output on any terminal: COLUMNS and an ASCII-only stdout (subprocesses: the process's own env) --------
def unicode_records(config: Path) -> None:
    _, run_dir, _ = project_of(config)
    path = run_dir / "incidents" / "incident-2.json"
    record = json.loads(path.read_text())
    record.update(symptom="loss \u2248 9 \u2192 spike \u2014 \u65e5\u672c", notes=["lr \u2192 \u00bd \u201cquoted\u201d"])
    path.write_text(json.dumps(record))


COMMANDS = {
    "status": ("status", "{config}"),
    "incidents": ("incidents", "--config", "{config}"),
    "incidents-show": ("incidents", "show", "incident-2", "--config", "{config}"),
    "verify": ("verify", "{out_dir}"),
    "replay-all": ("replay", "--all", "--config", "{config}"),
    "ledger": ("ledger", "{run_dir}", "--output", "{root}/ledger"),
}
COLUMNS_VALUES = ["0", "1", "5", "39", "99999999", "\u00b2", "abc", "-3", ""]


def run_many(jobs: list[tuple[str, tuple, dict]], cwd: Path) -> dict[str, subprocess.CompletedProcess]:
    def one(job):
        name, args, env = job
        return name, subprocess.run([RUNBOOK, *args], capture_output=True, cwd=cwd, timeout=240,
                                    env={**os.environ, **env})
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(one, jobs))


# replay --all exits 1: the fixture's records hold no snapshot, so the replayed decisions differ
EXPECTED = {"status": (0, "incidents 2"), "incidents": (0, "incident-1"), "incidents-show": (0, "incident-2"),
            "verify": (0, "checkpoint(s)"), "replay-all": (1, "replayed"), "ledger": (0, "Failure ledger")}


def check_outputs(finished_run, jobs_of) -> int:
    root, run_dir, out_dir = project_of(finished_run)
    unicode_records(finished_run)
    fill = {"config": finished_run, "out_dir": out_dir, "run_dir": run_dir, "root": root}
    commands = {name: tuple(a.format(**fill) for a in args) for name, args in COMMANDS.items()}
    results = run_many(jobs_of(commands), root)
    for name, result in results.items():
        code, words = EXPECTED[name.split("|")[0]]
        stderr = result.stderr.decode("utf-8", "replace")
        assert "Traceback" not in stderr and "UnicodeEncodeError" not in stderr, (name, stderr)
        assert result.returncode == code, (name, result.returncode, stderr)
        assert result.stdout.strip(), f"{name}: printed nothing"
        if name.endswith("|ascii"):
            result.stdout.decode("ascii")   # degraded, never a crash
        assert words in result.stdout.decode("ascii", "replace"), (name, result.stdout[:400])
    return len(results)


def test_output_with_columns_0_and_an_ascii_stdout(finished_run):
    """The reproductions: COLUMNS=0 printed nothing (exit 0); an ASCII stdout raised UnicodeEncodeError."""
    assert check_outputs(finished_run, lambda commands: [
        *((f"{name}|COLUMNS=0", args, {"COLUMNS": "0"}) for name, args in commands.items()),
        *((f"{name}|ascii", args, {"PYTHONIOENCODING": "ascii"}) for name, args in commands.items())]) == 12


@pytest.mark.slow
def test_output_with_any_columns(finished_run):
    assert check_outputs(finished_run, lambda commands: [
        (f"{name}|COLUMNS={value}", args, {"COLUMNS": value})
        for value in COLUMNS_VALUES if value != "0" for name, args in commands.items()
        if name in ("status", "incidents", "incidents-show")]) == 3 * (len(COLUMNS_VALUES) - 1)


def test_columns_are_clamped_not_passed_through():
    from runbook.terminal import MAX_COLUMNS, MIN_COLUMNS, clamped_columns

    assert clamped_columns("0") == str(MIN_COLUMNS) and clamped_columns("1") == str(MIN_COLUMNS)
    assert clamped_columns("99999999") == str(MAX_COLUMNS) and clamped_columns("\u00b2") == str(MIN_COLUMNS)
    assert clamped_columns("120") is None and clamped_columns(None) is None and clamped_columns("abc") is None
    assert clamped_columns(None, terminal_columns=12) == str(MIN_COLUMNS) and clamped_columns(None, 200) is None


# --- the lock holder's pid is checked ------------------------------------------------------------------
def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("written", ["dead", "garbage", "empty", "huge"])
def test_a_stale_pid_in_the_lock_file_is_called_stale(finished_run, slack, written):
    with_slack(finished_run, slack)
    _, run_dir, _ = project_of(finished_run)
    (run_dir / "outbox").mkdir()
    (run_dir / "outbox" / "000000000001.json").write_text(json.dumps(message()))
    pid = dead_pid()
    fd = os.open(run_dir / "watch.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # this test process holds it, as a watcher's child might
        os.write(fd, {"dead": f"{pid}\n", "garbage": "xyz\n", "empty": "", "huge": "9" * 40 + "\n"}[written].encode())
        code, text = invoke("status", str(finished_run))
        assert code == 0, text
        flat = " ".join(text.split())
        if written == "dead":
            assert f"names pid {pid}, which is stale" in flat and f"running, pid {pid}" not in flat
        assert f"/proc/locks says pid {os.getpid()} holds it" in flat, flat
        code, text = invoke("notify", str(finished_run), "--flush")
        flat = " ".join(text.split())
        assert code == 5 and f"pid {os.getpid()} holds it" in flat, flat
    finally:
        os.close(fd)


def test_a_live_watcher_pid_is_named_plainly(finished_run):
    _, run_dir, _ = project_of(finished_run)
    fd = os.open(run_dir / "watch.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        code, text = invoke("status", str(finished_run))
        assert f"watcher   running, pid {os.getpid()}" in text and "stale" not in text
    finally:
        os.close(fd)


# --- `watch --dry-run` on a trainer gone without a recorded exit: its pid, never "pid None" ----------------
def test_the_dry_run_plan_names_the_journals_trainer_pid(project):
    """The toy's project: the step comes from its progress lines, read by its adapter; the pid from the journal."""
    project.set(data_hash="sha256:" + "0" * 64)
    log = project.run_dir / "logs" / "trainer-001.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"toy step {s}/40 loss 6.4 took 20.00 ms\n" for s in range(1, 4)))
    pid = dead_pid()
    entries = [{"time": 1.0, "kind": "launch", "launch": 1, "pid": pid, "log": str(log), "resume_from": None, "argv": []},
               {"time": 1.1, "kind": "transition", "from": "starting", "to": "running", "reason": "launch 1"}]
    journal = "".join(json.dumps(e) + "\n" for e in entries)
    (project.run_dir / "journal.jsonl").write_text(journal)
    result = subprocess.run([RUNBOOK, "watch", str(project.config), "--dry-run", "--accept-data-change"],
                            capture_output=True, text=True, timeout=120, cwd=project.root,
                            env={**os.environ, "PYTHONPATH": str(REPO)})   # the watcher imports the toy's adapter
    assert result.returncode == 0, result.stdout + result.stderr
    assert "DRY-RUN unknown-exit would fire" in result.stdout, result.stdout
    assert f"trainer pid {pid} ended at step 3" in result.stdout and "pid None" not in result.stdout
    assert (project.run_dir / "journal.jsonl").read_text() == journal and not project.out_dir.exists()   # it acted on nothing


def test_journal_pid_only_fills_a_missing_pid():
    from engine.core.state import StateSnapshot, TrainerStatus
    from engine.watch.dry_run import with_journal_pid

    gone = StateSnapshot(trainer=TrainerStatus())
    assert with_journal_pid(gone, 41).trainer.pid == 41 and with_journal_pid(gone, None).trainer.pid is None
    live = StateSnapshot(trainer=TrainerStatus(pid=7, alive=True))
    assert with_journal_pid(live, 41).trainer.pid == 7


# --- `init --from-litgpt` says where the data folders it writes resolve --------------------------------------
LITGPT_YAML = """\
model_name: pythia-14m
out_dir: out/pretrain
data:
  class_path: litgpt.data.TextFiles
  init_args:
    train_data_path: corpus/train
    val_data_path: corpus/val
tokenizer_dir: tokenizer
train:
  global_batch_size: 16
  micro_batch_size: 4
  max_tokens: 10240
  save_interval: 5
optimizer:
  class_path: torch.optim.AdamW
  init_args:
    lr: 0.003
"""


@pytest.mark.parametrize("project_dir", ["elsewhere", "here"])
def test_init_says_where_the_data_folders_resolve(tmp_path, monkeypatch, project_dir):
    user = tmp_path / "user"
    for folder in ("corpus/train", "corpus/val", "tokenizer", "litgpt"):
        (user / folder).mkdir(parents=True)
    (user / "litgpt" / "pretrain.yaml").write_text(LITGPT_YAML)
    monkeypatch.chdir(user)
    target = tmp_path / "proj" if project_dir == "elsewhere" else user
    code, text = invoke("init", "--from-litgpt", "litgpt/pretrain.yaml", str(target))
    assert code == 0, text
    flat = " ".join(text.split())
    if project_dir == "here":
        assert "warning" not in flat
        return
    for key, value in (("train_dir", "corpus/train"), ("val_dir", "corpus/val"), ("tokenizer_dir", "tokenizer")):
        assert (f"warning: data.{key} `{value}` (from litgpt/pretrain.yaml) resolves to {target.resolve() / value}, "
                f"against the project folder {target.resolve()}, and that folder does not exist; it does exist "
                f"relative to where you ran this ({user.resolve() / value})") in flat, flat
    assert (target / "configs" / "run_config.yaml").is_file()
