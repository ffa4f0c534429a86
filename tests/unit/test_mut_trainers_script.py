"""Kind script (engine/trainers/script/, lines.py aside): the argv and environment of a launch from the run
config's templates, the launcher's rank count, the checkpoint folders of the sdk's contract, and the adapter
`runbook check` and the watcher use; each on a real project folder in tmp_path."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import zipfile
from pathlib import Path

import pytest

from engine.observe.throughput import ProgressMeaning
from engine.observe.events import CheckpointSaving, Progress
from engine.trainers.run_config import load_config
from engine.trainers.script import formats, template
from engine.trainers.script.adapter import ScriptAdapter, script_index
from engine.trainers.script.launch import NOTICE_SIGNALS_ENV, argv_of, launch_spec, trainer_env
from engine.trainers.script.layout import FolderLayout
from engine.trainers.script.settings import ScriptSettings
from engine.trainers.script.world import _count, _flag, world_size

COMMAND = ["{python}", "train.py", "--out", "{out_dir}", "--lr", "{lr}", "--micro", "{micro_batch_size}"]


def script_project(root: Path, command: list[str] = COMMAND, script: bool = True, **trainer) -> Path:
    (root / "configs").mkdir(parents=True)
    if script:
        (root / "train.py").write_text("print('training')\n")
    config = {
        "micro_batch_size": 4, "batch_size": 16, "lr": 0.003, "save_interval": 4, "keep_last_k": 3, "seed": 7,
        "max_tokens": 24 * 16 * 32, "out_dir": "checkpoints/pretrain", "run_dir": "runs/pretrain",
        "model": {"block_size": 32},
        "data": {"train_dir": "data/train", "val_dir": "data/val", "tokenizer_dir": "data/tokenizer", "make_default": False},
        "trainer": {"kind": "script", "device": "cpu", "command": command, **trainer},
    }
    (root / "configs" / "run_config.yaml").write_text(json.dumps(config, indent=1))
    return root / "configs" / "run_config.yaml"


# --- templates ------------------------------------------------------------------------------------------


def test_a_template_names_only_known_fields_and_braces_double():
    template.check("--lr={lr} {{literal}} {world_size}")
    with pytest.raises(ValueError, match=r"unknown template field \{learning_rate\} in '--lr=\{learning_rate\}'"):
        template.check("--lr={learning_rate}")
    with pytest.raises(ValueError, match="unknown template field"):
        template.check("{}")
    assert template.render("{{x}} {lr}/{seed}", {"lr": "0.1", "seed": 3}) == "{x} 0.1/3"


def test_the_values_of_a_launch_come_from_the_run_config(tmp_path):
    loaded = load_config(script_project(tmp_path / "p"))
    values = template.values_of(loaded, None)
    assert values["python"] == sys.executable and values["resume"] == "" and values["world_size"] == 1
    assert values["grad_accum"] == 16 // 4 and values["max_steps"] == 24 and values["lr"] == "0.003"
    assert (values["out_dir"], values["train_dir"]) == (loaded.out_dir, tmp_path / "p" / "data" / "train")
    assert values["devices"] == 1 and values["num_nodes"] == 1 and values["device"] == "cpu"
    assert template.values_of(loaded, "/ck/state.pt")["resume"] == "/ck/state.pt"
    # two ranks share the global batch: half the accumulation; never below one
    two = template.values_of(loaded, None, ["torchrun", "--nproc-per-node", "2", "train.py", "--out", "{out_dir}"])
    assert two["world_size"] == 2 and two["grad_accum"] == 2
    many = template.values_of(loaded, None, ["torchrun", "--nproc-per-node", "8"])
    assert many["grad_accum"] == 1


# --- the launcher's ranks -------------------------------------------------------------------------------


def test_a_launcher_flag_is_read_in_both_spellings_and_not_past_the_end():
    assert _flag(["torchrun", "--nnodes", "2"], ("--nnodes",)) == "2"
    assert _flag(["torchrun", "--nnodes=3"], ("--nnodes",)) == "3"
    assert _flag(["torchrun", "--nnodes"], ("--nnodes",)) is None          # a flag with no value after it
    assert _flag(["torchrun", "--nnodesx", "2"], ("--nnodes",)) is None
    assert _flag(["--nnodes", "4", "--nnodes", "5"], ("--nnodes",)) == "4"
    assert _flag(["torchrun", "--nnodes=1=2"], ("--nnodes",)) == "1=2"
    assert world_size(["torchrun", "--nproc-per-node=2=3"], devices=5) == 5            # no count: the config's


def test_a_rank_count_is_a_positive_number_or_the_most_of_an_elastic_range():
    assert _count(None) is None and _count("gpu") is None and _count("0") is None
    assert _count("1") == 1 and _count("2") == 2 and _count("1:4") == 4


def test_the_world_is_the_total_else_per_node_times_nodes_else_the_configs():
    assert world_size(["accelerate", "launch", "--num_processes", "3", "--num_gpus", "2"]) == 3
    assert world_size(["torchrun", "--nproc-per-node", "2"]) == 2
    assert world_size(["torchrun", "--nproc-per-node", "2", "--nnodes", "3"], devices=5, num_nodes=7) == 6
    assert world_size(["python"], devices=1, num_nodes=1) == 1
    assert world_size(["python"], devices=2, num_nodes=1) == 2


# --- a launch -------------------------------------------------------------------------------------------


def test_the_resume_arguments_are_added_only_with_a_file_to_resume():
    values = {"python": "py", "resume": "", "lr": 1}
    assert argv_of(["{python}", "t.py"], ["--resume", "{resume}"], values) == ["py", "t.py"]
    assert argv_of(["{python}", "t.py"], ["--resume", "{resume}"], {**values, "resume": "/s.pt"}) == [
        "py", "t.py", "--resume", "/s.pt"]


def test_a_launch_is_written_down_with_its_environment_and_signals(tmp_path):
    loaded = load_config(script_project(tmp_path / "p", notice_signals=["SIGUSR1"], memory_limit_mb=3,
                                        env={"MY_FLAG": "1"}))
    env = trainer_env(loaded)
    assert env[NOTICE_SIGNALS_ENV] == "SIGUSR1" and env["MY_FLAG"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["RUNBOOK_OUT_DIR"] == str(loaded.out_dir) and env["RUNBOOK_TRAIN_DIR"] == str(tmp_path / "p" / "data" / "train")
    spec = launch_spec(loaded, tmp_path / "launch" / "1", None, ["py", "t.py"])
    assert spec.memory_limit_bytes == 3 * 1024 * 1024
    assert (spec.notice_signal, spec.quit_signal) == ("SIGUSR1", "SIGTERM")
    assert json.loads(spec.config_file.read_text()) == {"argv": ["py", "t.py"], "hyperparameters": {
        "lr": 0.003, "micro_batch_size": 4, "batch_size": 16}}
    again = launch_spec(loaded, tmp_path / "launch" / "1", None, ["py", "t.py", "--again"])    # the same folder again
    assert json.loads(again.config_file.read_text())["argv"] == ["py", "t.py", "--again"]
    default = launch_spec(load_config(script_project(tmp_path / "q")), tmp_path / "launch" / "2", None, ["py"])
    assert (default.notice_signal, default.quit_signal, default.memory_limit_bytes) == ("SIGTERM", "SIGUSR2", None)
    none = launch_spec(load_config(script_project(tmp_path / "r", notice_signals=[])), tmp_path / "launch" / "3", None, ["py"])
    assert (none.notice_signal, none.quit_signal) == (None, "SIGTERM")


def test_the_adapter_launches_the_command_and_resumes_with_the_resume_arguments(tmp_path):
    loaded = load_config(script_project(tmp_path / "p"))
    adapter = ScriptAdapter()
    spec = adapter.prepare_launch(loaded, tmp_path / "launch", None, "sha256:x")
    assert spec.argv == [sys.executable, "train.py", "--out", str(loaded.out_dir), "--lr", "0.003", "--micro", "4"]
    resumed = adapter.prepare_launch(loaded, tmp_path / "launch2", Path("/ck/step-000008/state.pt"), "sha256:x")
    assert resumed.argv[-2:] == ["--resume", "/ck/step-000008/state.pt"] and resumed.resume_from == Path("/ck/step-000008/state.pt")
    assert adapter.progress_meaning(loaded.config) == ProgressMeaning(16 * 32, 16 * 32, 16 * 32)   # a line per optimizer step
    assert adapter.relocate_run_dir(None, tmp_path, tmp_path / "x") == 0
    assert adapter.share_run_data(tmp_path, tmp_path / "x") == [] and adapter.data_fingerprint(loaded) is None
    assert adapter.is_installed() is True


def test_a_resume_hands_the_checkpoints_state_pt_and_its_nan_search_reads_the_weights_key(tmp_path):
    import torch
    loaded = load_config(script_project(tmp_path / "p", weights_key="net"))
    adapter = ScriptAdapter()
    folder = loaded.out_dir / "step-000008"
    folder.mkdir(parents=True)

    class Saved:   # a checkpoint as the catalog lists it
        path = folder
        step = 8

    assert adapter.find_nonfinite(Saved, 3) == []                        # no state.pt: nothing to read
    torch.save({"net": {"w": torch.tensor([float("nan")])}, "model": {"v": torch.ones(1)}}, folder / "state.pt")
    plan = adapter.prepare_resume(Saved, loaded, tmp_path / "scratch")
    assert (plan.file, plan.detail, plan.note) == (folder / "state.pt", "from step 8", None)
    assert adapter.find_nonfinite(Saved, 3) == ["w"]                     # under the bound run config's weights_key
    assert ScriptAdapter().find_nonfinite(Saved, 3) == []                # unbound: the default key, "model"


def test_the_adapter_reads_the_sdks_lines(tmp_path):
    adapter = ScriptAdapter()
    assert adapter.parse_line("runbook: step 3 loss 1.5 took 12 ms") == Progress(3, 3, 1.5, 12.0, True)
    assert adapter.parse_line(f"runbook: saving {tmp_path / 'step-000004'}") == CheckpointSaving(
        path=str(tmp_path / "step-000004" / "state.pt"))


def test_the_script_is_found_after_the_launcher():
    assert script_index(["python", "train.py"]) == 1
    assert script_index(["train.py", "x.py"]) == 1                 # the program itself is not the script
    assert script_index(["torchrun", "--nproc-per-node", "2", "-x.py", "t.py"]) == 4
    assert script_index(["python", "-m", "mod"]) is None


def test_the_check_names_a_missing_program_and_a_missing_script(tmp_path):
    fine = load_config(script_project(tmp_path / "p"))
    assert ScriptAdapter().check_environment(fine) == []
    by_path = load_config(script_project(tmp_path / "q", command=["./run.sh", "--x"], script=False))
    (tmp_path / "q" / "run.sh").write_text("#!/bin/sh\n")
    assert ScriptAdapter().check_environment(by_path) == []
    missing_config = script_project(tmp_path / "r", command=["no-such-program-xyz", "train.py"], script=False)
    missing = load_config(missing_config)
    program, script = ScriptAdapter().check_environment(missing)
    lines = [line.strip() for line in missing_config.read_text().splitlines()]
    program_line, script_line = lines.index('"no-such-program-xyz",') + 1, lines.index('"train.py"') + 1
    assert program.startswith(f"{missing_config}:{program_line}:") and script.startswith(f"{missing_config}:{script_line}:")
    assert "trainer.command[0] is 'no-such-program-xyz': no such executable on PATH or file" in program
    assert f"trainer.command[1] is 'train.py': no file {tmp_path / 'r' / 'train.py'}" in script


def test_a_program_found_on_path_needs_no_file_and_a_command_without_a_script_needs_none(tmp_path):
    on_path = load_config(script_project(tmp_path / "p", command=["sh", "train.py"]))
    assert ScriptAdapter().check_environment(on_path) == []
    no_script = load_config(script_project(tmp_path / "q", command=["sh", "-c", "true"], script=False))
    assert ScriptAdapter().check_environment(no_script) == []
    no_file = load_config(script_project(tmp_path / "r", command=["sh", "gone.py"], script=False))
    [problem] = ScriptAdapter().check_environment(no_file)
    assert f"trainer.command[1] is 'gone.py': no file {tmp_path / 'r' / 'gone.py'}" in problem


def test_the_settings_keep_the_command_they_validated():
    settings = ScriptSettings(kind="script", command=["{python}", "t.py", "{lr}"])
    assert settings.command == ["{python}", "t.py", "{lr}"] and settings.resume_args == ["--resume", "{resume}"]
    with pytest.raises(ValueError, match="unknown template field"):
        ScriptSettings(kind="script", command=["{python}", "{nope}"])


# --- the contract's checkpoint folders ------------------------------------------------------------------


def test_a_checkpoint_folder_is_named_by_its_padded_step_and_read_back():
    layout = ScriptAdapter().layout
    assert layout.folder_name(8) == "step-000008" and layout.step_of("step-000008") == 8
    assert layout.step_of("step-") is None and layout.step_of("xstep-1") is None and layout.step_of("final") is None
    assert layout.step_in_path("/o/step-000004/sub/step-000012/state.pt") == 12
    assert layout.step_in_path("/o/final/state.pt") is None
    assert layout.resume_file(Path("/o/step-000004")) == Path("/o/step-000004/state.pt")
    assert layout.writes("state.pt") and not layout.writes("notes.txt")


def test_a_layout_writes_its_files_and_its_numbered_ones():
    import re
    layout = FolderLayout("ck-", "m.bin", 3, frozenset({"opt.json"}), patterns=(re.compile(r"rng_\d+\.pth"),))
    assert layout.writes("m.bin") and layout.writes("opt.json") and layout.writes("rng_3.pth")
    assert not layout.writes("rng_x.pth") and not layout.writes("xrng_3.pth")
    assert layout.folder_name(7) == "ck-007"


def test_a_folder_scan_reads_only_the_trainers_files_and_needs_the_resume_file(tmp_path):
    layout = ScriptAdapter().layout
    folder = tmp_path / "step-000004"
    folder.mkdir()
    assert layout.scan(folder, True) == ("no state.pt", {})
    assert not layout.looks_whole(folder)
    (folder / "state.pt").write_bytes(b"not a zip")
    problem, _ = layout.scan(folder, False)
    assert problem.startswith("state.pt: not a readable torch file")
    assert not layout.looks_whole(folder)
    zip_file(folder / "state.pt", {"archive/data.pkl": b"x"})
    (folder / "extra.json").write_text("{")                       # not the trainer's: not checked here
    (folder / "sub.pt").mkdir()
    problem, digests = layout.scan(folder, True)
    assert problem is None and list(digests) == ["state.pt"] and layout.looks_whole(folder)


def test_the_saves_a_log_announces_are_the_steps_and_final(tmp_path):
    layout = ScriptAdapter().layout
    out = tmp_path / "out"
    log = "\n".join(f"runbook: saving {out / name}" for name in ("step-000004", "final", "other")).encode()
    assert layout.announced_saves(log, out) == {"step-000004", "final"}


# --- a checkpoint file's own format (formats.py) -----------------------------------------------------------


def safetensors(path: Path, header: object, data: bytes = b"", length: int | None = None) -> Path:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


def test_a_safetensors_file_shorter_than_its_length_field_is_truncated(tmp_path):
    (tmp_path / "a.safetensors").write_bytes(b"1234567")
    assert formats.safetensors_problem(tmp_path / "a.safetensors") == \
        "a.safetensors: 7 bytes, shorter than a safetensors header (truncated)"
    (tmp_path / "b.safetensors").write_bytes(struct.pack("<Q", 0))      # 8 bytes: a length, an empty header
    assert formats.safetensors_problem(tmp_path / "b.safetensors") == "b.safetensors: its header is not JSON (corrupted)"


def test_a_header_may_fill_the_file_but_not_pass_its_end(tmp_path):
    exact = safetensors(tmp_path / "exact.safetensors", {})
    assert formats.safetensors_problem(exact) is None and formats.whole(exact)
    past = safetensors(tmp_path / "past.safetensors", {}, length=3)
    assert formats.safetensors_problem(past) == "past.safetensors: header of 3 bytes in a 10-byte file (truncated or not safetensors)"
    assert not formats.whole(past)


def test_a_header_longer_than_safetensors_own_limit_is_refused_unread(tmp_path):
    path = tmp_path / "big.safetensors"
    limit = 100 * 1024 * 1024
    with open(path, "wb") as fh:                                          # sparse: 101 MiB, nothing written
        fh.write(struct.pack("<Q", limit + 1))
        fh.truncate(limit + (1 << 20))
    assert formats.safetensors_problem(path) == (f"big.safetensors: header of {limit + 1} bytes in a "
                                                 f"{limit + (1 << 20)}-byte file (truncated or not safetensors)")


def entry(begin, end) -> dict:
    return {"dtype": "F32", "shape": [1], "data_offsets": [begin, end]}


def test_a_header_describes_exactly_the_bytes_after_it():
    assert formats.header_problem({"__metadata__": {"format": "pt"}, "a": entry(0, 8), "b": entry(8, 16)}, 20, 36) is None
    assert formats.header_problem({"b": entry(8, 16), "a": entry(0, 8)}, 20, 36) is None    # the last end counts
    assert formats.header_problem({"a": entry(0, 0)}, 20, 20) is None                         # an empty tensor
    assert formats.header_problem({"a": entry(0, 8)}, 20, 27) == "27 bytes but its header describes 28 (truncated)"
    assert formats.header_problem({"a": entry(0, 8)}, 20, 29) == "1 bytes beyond its tensors (corrupted)"
    assert formats.header_problem([entry(0, 8)], 20, 28) == "its header is not a mapping (corrupted)"


@pytest.mark.parametrize("offsets", [[0, 8, 16], [-1, 8], [9, 8], [0.0, 8], [True, 8], [0], "0-8"])
def test_malformed_data_offsets_are_named(offsets):
    problem = formats.header_problem({"w": {"data_offsets": offsets}}, 20, 28)
    assert problem == f"its header is malformed: tensor 'w' has data_offsets {repr(offsets)[:40]} (corrupted)"


def test_a_malformed_entry_is_named_in_a_bounded_line():
    name, offsets = "n" * 100, list(range(30))
    problem = formats.header_problem({name: {"data_offsets": offsets}}, 20, 28)
    assert problem == f"its header is malformed: tensor {name[:80]!r} has data_offsets {repr(offsets)[:40]} (corrupted)"


def member(name: str = "archive/data.pkl", compress_type: int = zipfile.ZIP_DEFLATED, file_size: int = 100,
           compress_size: int = 100, flag_bits: int = 0) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.compress_type, info.file_size, info.compress_size, info.flag_bits = compress_type, file_size, compress_size, flag_bits
    return info


def test_a_members_compression_ratio_is_capped_at_fifty_to_one():
    assert formats.members_problem([member(file_size=5000, compress_size=100)]) is None
    assert formats.members_problem([member(file_size=5001, compress_size=100)]) == (
        "member archive/data.pkl inflates 100 bytes to 5001 (at most 50:1 is read; torch.save stores its members uncompressed)")
    assert formats.members_problem([member(file_size=50, compress_size=0)]) is None
    assert formats.members_problem([member(file_size=51, compress_size=0)]).startswith("member archive/data.pkl inflates 0")
    assert formats.members_problem([member(compress_type=zipfile.ZIP_STORED, file_size=10**12, compress_size=1)]) is None


def test_deflated_members_are_capped_in_total():
    half = 1 << 29
    assert formats.members_problem([member(file_size=half, compress_size=half), member(file_size=half, compress_size=half)]) is None
    assert formats.members_problem([member(file_size=half, compress_size=half),
                                    member(file_size=half + 1, compress_size=half)]) == \
        f"its deflated members inflate to more than {1 << 30} bytes"


def test_only_the_encryption_bit_makes_a_member_encrypted():
    assert formats.members_problem([member(flag_bits=0x1)]) == "member archive/data.pkl is encrypted"
    assert formats.members_problem([member(flag_bits=0x2 | 0x8)]) is None
    assert formats.members_problem([member(name="m" * 200, flag_bits=0x1)]) == f"member {'m' * 120} is encrypted"
    assert formats.members_problem([member(compress_type=zipfile.ZIP_BZIP2)]) == (
        "member archive/data.pkl uses compression method 12, which torch.save never writes")


def zip_file(path: Path, members: dict[str, bytes], compression=zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_a_torch_file_is_read_through_and_a_flipped_byte_fails_its_crc(tmp_path):
    good = zip_file(tmp_path / "state.pt", {"archive/data.pkl": b"x" * 3000, "archive/version": b"3"})
    assert formats.zip_problem(good) is None and formats.whole(good)
    data = bytearray(good.read_bytes())
    data[data.index(b"x" * 100) + 50] ^= 0xFF
    bad = tmp_path / "bad.pt"
    bad.write_bytes(bytes(data))
    assert formats.zip_problem(bad) == "bad.pt: member archive/data.pkl fails its CRC (corrupted)"
    long = zip_file(tmp_path / "long.pt", {"d" * 200: b"x" * 100})
    flipped = bytearray(long.read_bytes())
    flipped[flipped.index(b"x" * 100) + 5] ^= 0xFF
    long.write_bytes(bytes(flipped))
    assert formats.zip_problem(long) == f"long.pt: member {'d' * 120} fails its CRC (corrupted)"


def test_a_file_that_is_no_zip_is_not_a_readable_torch_file(tmp_path):
    (tmp_path / "state.pt").write_bytes(b"PK" + b"\0" * 300)
    problem = formats.zip_problem(tmp_path / "state.pt")
    assert problem == "state.pt: not a readable torch file (File is not a zip file; truncated?)"
    assert formats.whole(tmp_path / "state.pt") is False


def test_an_unreadable_torch_file_is_said_in_a_bounded_line(tmp_path):
    gone = tmp_path / ("d" * 150) / "state.pt"
    problem = formats.zip_problem(gone)
    assert problem == f"state.pt: not a readable torch file ({str(FileNotFoundError(2, 'No such file or directory', str(gone)))[:120]}; truncated?)"
    assert "[Errno 2]" in problem


def test_json_files_are_parsed_and_other_files_only_exist(tmp_path):
    (tmp_path / "a.json").write_text('{"step": 4}')
    (tmp_path / "b.json").write_bytes(b"\xff\xfe{")
    (tmp_path / "c.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "d.txt").write_text("anything")
    assert formats.json_problem(tmp_path / "a.json") is None
    assert formats.json_problem(tmp_path / "b.json") == "b.json: not valid JSON (truncated or corrupted)"
    assert formats.json_problem(tmp_path / "c.json") == "c.json: not JSON this runbook will read: nested too deep"
    assert formats.whole(tmp_path / "d.txt") and not formats.whole(tmp_path / "e.txt")


def test_a_scan_answers_the_first_problem_or_every_files_digest(tmp_path):
    good = zip_file(tmp_path / "state.pt", {"archive/data.pkl": b"x" * 10})
    (tmp_path / "notes.txt").write_bytes(b"hello")
    (tmp_path / "meta.json").write_text("{")
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    assert formats.scan_files([good, tmp_path / "notes.txt"], True) == (
        None, {"state.pt": digest, "notes.txt": hashlib.sha256(b"hello").hexdigest()})
    assert formats.scan_files([good], False) == (None, {})
    assert formats.scan_files([good, tmp_path / "meta.json"], True) == ("meta.json: not valid JSON (truncated or corrupted)", {})
    big = tmp_path / "big.bin.txt"
    big.write_bytes(os.urandom(3 << 20))                                  # more than one read of the file
    assert formats.sha256(big) == hashlib.sha256(big.read_bytes()).hexdigest()


# --- a checkpoint's tensors (weights.py) ---------------------------------------------------------------------

from engine.checkpoints.rollback import UnreadableWeights  # noqa: E402
from engine.trainers.script import weights  # noqa: E402


def nested(depth: int, leaf) -> dict:
    """`leaf` under `depth` levels of one-key dicts, at the name l.l....l."""
    value = leaf
    for _ in range(depth):
        value = {"l": value}
    return value


def test_tensors_are_found_down_to_the_walks_depth_and_named_by_their_path(tmp_path):
    import torch
    nan = torch.tensor([float("nan")])
    # under "model": the state at depth 0, its containers down to depth 63 walked, the tensor at 64 found
    torch.save({"model": {"deep": nested(63, nan), "list": [torch.ones(1), (nan,)]}}, tmp_path / "ok.pt")
    assert weights.nonfinite_names(tmp_path / "ok.pt", "model", 5) == ["deep" + ".l" * 63, "list.1.0"]
    torch.save({"model": {"deep": nested(64, nan), "ok": torch.ones(1)}}, tmp_path / "deeper.pt")
    assert weights.nonfinite_names(tmp_path / "deeper.pt", "model", 5) == []
    # a list at depth 63 is walked, one at depth 64 is not
    torch.save({"model": {"deep": [nested(61, [nan])], "ok": torch.ones(1)}}, tmp_path / "list.pt")
    assert weights.nonfinite_names(tmp_path / "list.pt", "model", 5) == ["deep.0" + ".l" * 61 + ".0"]
    torch.save({"model": {"deep": [nested(62, [nan])], "ok": torch.ones(1)}}, tmp_path / "list2.pt")
    assert weights.nonfinite_names(tmp_path / "list2.pt", "model", 5) == []


def test_the_search_stops_at_its_limit_and_needs_a_floating_tensor(tmp_path):
    import torch
    nan = torch.tensor([float("nan")])
    torch.save({"a": nan, "b": nan, "c": nan}, tmp_path / "three.pt")
    assert weights.nonfinite_names(tmp_path / "three.pt", None, 2) == ["a", "b"]
    assert weights.nonfinite_names(tmp_path / "three.pt", None, 1) == ["a"]
    torch.save({"model": {"step": torch.tensor([1, 2])}}, tmp_path / "ints.pt")
    with pytest.raises(UnreadableWeights, match=r"ints.pt: no floating-point tensor under 'model' to scan"):
        weights.nonfinite_names(tmp_path / "ints.pt", "model", 3)


def test_a_missing_weights_key_lists_ten_keys_or_the_states_type(tmp_path):
    import torch
    torch.save({f"k{i:02d}": i for i in range(12)}, tmp_path / "many.pt")
    with pytest.raises(UnreadableWeights) as raised:
        weights.nonfinite_names(tmp_path / "many.pt", "model", 3)
    assert str(raised.value) == ("many.pt: no key 'model' (trainer.weights_key); its keys: "
                                 + str([f"k{i:02d}" for i in range(10)]))
    torch.save([torch.ones(2)], tmp_path / "list.pt")
    with pytest.raises(UnreadableWeights) as raised:
        weights.nonfinite_names(tmp_path / "list.pt", "model", 3)
    assert str(raised.value) == "list.pt: no key 'model' (trainer.weights_key); its keys: list"


def test_numpy_values_beside_the_tensors_are_read(tmp_path):
    import numpy
    import torch
    torch.save({"model": {"w": torch.ones(2)}, "best": numpy.float64(1.5), "seen": numpy.arange(3)}, tmp_path / "s.pt")
    assert weights.nonfinite_names(tmp_path / "s.pt", "model", 3) == []
    state = weights.read_saved(tmp_path / "s.pt")
    assert state["best"] == 1.5 and list(state["seen"]) == [0, 1, 2]


def test_why_a_file_is_unreadable_is_one_line():
    assert weights.why_unreadable(RuntimeError("Unsupported global: GLOBAL os.system was not an allowed global")) == \
        "it holds os.system, which runbook does not unpickle (loading it could run code)"
    assert weights.why_unreadable(RuntimeError("expected a tensor but got <class 'mymod.Thing'> here")) == \
        "it holds mymod.Thing, which runbook does not unpickle (loading it could run code)"
    assert weights.why_unreadable(ValueError("first\n  second line  \n\n")) == "ValueError: second line"
    assert weights.why_unreadable(EOFError("")) == "EOFError: "
    assert weights.why_unreadable(OSError("x" * 300)) == "OSError: " + "x" * 160
