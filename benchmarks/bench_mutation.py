"""Mutation score of the pure core: how many small bugs planted in a module its fast tests catch.

An equivalent of mutmut, written for this repository (mutmut rewrites files in place; this working tree is
shared). For each module of MODULES, every mutation site is listed from its AST, in source order:

  compare   == <-> !=, < -> >= and <=, <= -> > and <, > -> <= and >=, >= -> < and >, in <-> not in, is <-> is not
  boolop    and <-> or
  constant  an int or float n -> n + 1 (not bools, not in annotations); True <-> False
  not       `not x` -> `x`
  return    `return <value>` -> `return None`

Only sites inside functions (module level: simple assignments) are mutated; class bodies (pydantic and
dataclass field declarations) are left alone. A mutant is applied in a forked child of one process that has
imported the tests once: the mutated module is compiled from the copy's source and each of the module's
functions gets the mutant's code object (`f.__code__ = ...`), so every `from m import f` sees it. The child
then runs the module's fast tests (TESTS) with pytest -x; a failing or timed-out run kills the mutant.

Everything runs in a copy of the repository (engine/, runbook/, playbooks/, tests/, configs/, pyproject.toml)
in a scratch folder: the working tree is never written.

    nice -n 10 python benchmarks/bench_mutation.py                      # every module, the table
    nice -n 10 python benchmarks/bench_mutation.py --module signature --survivors
    nice -n 10 python benchmarks/bench_mutation.py --without-mut-tests   # the score before tests/unit/test_mut_*.py
    python benchmarks/bench_mutation.py --smoke                         # 6 exit_codes mutants, < 60 s

Exit 0; 1 when the unmutated tests fail in the copy (no score is honest then); 2 a usage error.
"""

from __future__ import annotations

import argparse
import ast
import copy
import gc
import io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# module key -> (source files, fast tests that cover them). The tests are what a change to the module is
# checked by; tests/unit/test_mut_<key>*.py (the tests written against this benchmark's survivors) are added.
CLAUSES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "engine" / "language" / "clauses").glob("*.py"))
MODULES: dict[str, tuple[list[str], list[str]]] = {
    "matcher": (["engine/language/matcher.py"],
                ["tests/language/test_playbook_language.py", "tests/unit/test_nan_needs_evidence.py"]),
    "planner": (["engine/language/planner.py"],
                ["tests/language/test_playbook_language.py", "tests/unit/test_env_names.py"]),
    "exit_codes": (["engine/core/exit_codes.py"], ["tests/unit/test_exit_codes.py"]),
    "signature": (["engine/records/signature.py"], ["tests/language/test_signatures.py", "tests/language/test_drafting.py"]),
    # (tests/language/test_clause_agreement.py also covers them, at 5-10 s a run: 249 mutants would take 40 min)
    "clauses": (CLAUSES, ["tests/language/test_playbook_language.py"]),
}
# Issue 45: the modules that touch processes and files, one block per area (each block kept apart so the
# areas' edits merge without touching each other).

# engine/core and engine/process: commands, redaction, locks, durable writes, process identity and control
MODULES.update({
    "bounded_command": (["engine/core/bounded_command.py"], ["tests/unit/test_run_action_bounds.py"]),
    "text_safety": (["engine/core/text_safety.py"], ["tests/unit/test_text_safety.py", "tests/unit/test_known_secrets.py"]),
    "lock": (["engine/core/lock.py"], ["tests/unit/test_nested_out_dir.py"]),
    "durable": (["engine/core/durable.py"], ["tests/unit/test_durable.py"]),
    "identity": (["engine/process/identity.py"], ["tests/unit/test_process_identity.py"]),
    "trainer_control": (["engine/process/trainer_control.py"], ["tests/unit/test_upkeep.py"]),
})

# engine/checkpoints

# (tests/trainers/test_formats.py also covers layout, store and script/lines.py: it reads examples/, which the copy lacks)
_CKPT_TESTS = ["tests/unit/test_checkpoints.py", "tests/unit/test_nested_out_dir.py"]
MODULES.update({
    "ckpt_layout": (["engine/checkpoints/layout.py"], [*_CKPT_TESTS, "tests/trainers/test_hf_checkpoint_files.py"]),
    "ckpt_rollback": (["engine/checkpoints/rollback.py"], ["tests/trainers/test_script_weights.py"]),
    "ckpt_retention": (["engine/checkpoints/retention.py"], ["tests/unit/test_upkeep.py"]),
    "ckpt_partial_saves": (["engine/checkpoints/partial_saves.py"], _CKPT_TESTS),
    "ckpt_out_dir_claim": (["engine/checkpoints/out_dir_claim.py"], ["tests/unit/test_nested_out_dir.py"]),
    "ckpt_catalog": (["engine/checkpoints/catalog.py"],
                    [*_CKPT_TESTS, "tests/unit/test_upkeep.py", "tests/trainers/test_script_weights.py", "tests/unit/test_evidence.py"]),
    "ckpt_store": (["engine/checkpoints/store.py", "engine/checkpoints/manifest.py", "engine/checkpoints/suspects.py",
                    "engine/checkpoints/last_link.py", "engine/checkpoints/pruning.py"],
                   [*_CKPT_TESTS, "tests/unit/test_manifest_confined.py", "tests/trainers/test_hostile_checkpoints.py",
                    "tests/unit/test_upkeep.py"]),
    "script_lines": (["engine/trainers/script/lines.py"], ["tests/trainers/test_hf_checkpoint_files.py"]),
})

# engine/watch/incident_runner and the trainer kinds engine/trainers/{hf,script}
# (tests/language/test_fuzz_records.py also reaches incident_runner's two formatters, at 5 s a run, and only
# checks that their output renders; engine/trainers/script/lines.py is another area's; tests/trainers/test_formats.py
# runs examples/, which the benchmark's copy does not hold)
HF = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "engine" / "trainers" / "hf").glob("*.py") if p.name != "__init__.py")
SCRIPT = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "engine" / "trainers" / "script").glob("*.py")
                if p.name not in ("__init__.py", "lines.py"))
MODULES.update({
    "incident_runner": (["engine/watch/incident_runner.py"], ["tests/language/test_drafting.py"]),
    "trainers_hf": (HF, ["tests/trainers/test_hf_parse_check.py",
                         "tests/trainers/test_hf_checkpoint_files.py", "tests/trainers/test_hostile_checkpoints.py",
                         "tests/unit/test_launcher_world.py"]),
    "trainers_script": (SCRIPT, ["tests/trainers/test_script_weights.py",
                                 "tests/trainers/test_hostile_checkpoints.py", "tests/unit/test_launcher_world.py"]),
})

COPIED = ["engine", "runbook", "playbooks", "tests", "configs", "benchmarks", "pyproject.toml", "README.md", "docs"]

# Mutants that cannot change behaviour, by (file, the mutated line as written, mutation): each with the reason.
# They are run and shown, and left out of the score (mutmut's `# pragma: no mutate`, kept here: the modules
# are other people's files). Keyed by the line's text, not its number, so an edit elsewhere keeps the entry;
# an edit of the line itself drops it (the mutant is then counted again). `#n`: the n-th such mutation on the
# line (source order), where the line has several.
_SIGNAL_RANGE = "if 128 < code < 128 + 65:"
_POPEN = "return -int(_signal.Signals[sig]) if sig and code is not None and code > 0 else code"
_SKIPPED_LINE = "if line[:1].isspace() or not line.strip():"
_WORD_CHECK = 'if found and any(word in found[0].rsplit(".", 1)[-1] for word in _EXCEPTION_WORDS):'
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("engine/core/exit_codes.py", "if code < 0:", "< -> <="): "code 0: signal_of(0) is None, as the fall-through gives",
    ("engine/core/exit_codes.py", "if code < 0:", "0 -> 1"): "code 0: signal_of(0) is None, as the fall-through gives",
    ("engine/core/exit_codes.py", _SIGNAL_RANGE, "< -> <="): "code 128 gives signal 0, which does not exist: None either way",
    ("engine/core/exit_codes.py", _SIGNAL_RANGE, "< -> <= #1"): "code 193 gives signal 65, which does not exist",
    ("engine/core/exit_codes.py", _SIGNAL_RANGE, "128 -> 129 #1"): "code 193 (128 + 65) gives signal 65, which does not exist",
    ("engine/core/exit_codes.py", _SIGNAL_RANGE, "65 -> 66"): "code 193 gives signal 65, which does not exist",
    ("engine/core/exit_codes.py", _POPEN, "> -> >="): "code 0 stands for no signal: sig is None, the code is returned either way",
    ("engine/core/exit_codes.py", _POPEN, "0 -> 1"): "code 1 stands for no signal: sig is None, the code is returned either way",
    ("engine/records/signature.py", _SKIPPED_LINE, "or -> and"):
        "an indented or blank line that is not skipped cannot match the exception pattern (a letter first): None either way",
    ("engine/records/signature.py", _SKIPPED_LINE, "1 -> 2"):
        "a line with one leading space that is not skipped cannot match the exception pattern either",
    ("engine/records/signature.py", _WORD_CHECK, "1 -> 2"): "rsplit('.', 2)[-1] is the same last part as rsplit('.', 1)[-1]",
    ("engine/language/clauses/log.py", "compile_pattern(value, False)  # raises ValueError with the reason", "False -> True"):
        "validation only: a pattern compiles with ignore_case exactly when it compiles without",
    ("engine/language/clauses/log.py", 'if self.log.scope == "tail" and ctx.tail_index is not None and regex in ctx.tail_index.position:',
     "in -> not in"): "the matcher's index holds every tail pattern of its set, and a scan finds the same first line "
                      "(tests/language/test_playbook_language.py::test_tail_index_gives_the_same_first_line_as_a_scan)",
    ("engine/language/clauses/log.py",
     "return next((line for line in lines if regex.search(line if len(line) <= MAX_LINE else line[:MAX_LINE])), None)",
     "<= -> <"): "a line of exactly MAX_LINE characters is its own first MAX_LINE characters",
}

# Issue 45's areas, as MODULES above.

# engine/core and engine/process
_BC, _TS, _DU = "engine/core/bounded_command.py", "engine/core/text_safety.py", "engine/core/durable.py"
_AT_IMPORT = ("a module constant the benchmark rebinds after import: the patterns were compiled from it at import "
              "(_COMPILED, _TRIGGER) and are not rebuilt, so nothing the module runs changes")
_NO_PROC = "the fallback for a system without /proc: never reached where /proc exists (Linux: here and CI), no test can run it"
EQUIVALENT.update({
    (_BC, "CHUNK = 64 * 1024", "64 -> 65"): "the read size: the same bytes arrive, in other chunks",
    (_BC, "CHUNK = 64 * 1024", "1024 -> 1025"): "the read size: the same bytes arrive, in other chunks",
    (_BC, "KEEP_BYTES = 64 * 1024", "64 -> 65"):
        "rebound after import: run_bounded's default and the run action's import were bound to the old value",
    (_BC, "KEEP_BYTES = 64 * 1024", "1024 -> 1025"):
        "rebound after import: run_bounded's default and the run action's import were bound to the old value",
    (_BC, "READS_PER_TURN = 16        # then look at the clock again: a flood never starves the deadline", "16 -> 17"):
        "how many chunks are read between two looks at the clock: the same output, a deadline seen 1 chunk later",
    (_BC, "if room > 0:", "> -> >="): "room 0: chunk[:0] adds nothing to the head and chunk[0:] is the whole chunk",
    (_BC, "if len(self.tail) > self.half:", "> -> >="): "a tail of exactly `half` bytes: del tail[:0] removes nothing",
    (_BC, "os.killpg(pgid, 0)", "0 -> 1"): _NO_PROC,
    (_BC, "return [pgid]", "return None"): _NO_PROC,
    (_BC, "return []", "return None"): _NO_PROC,
    (_TS, "_OPTIONS.log_errors = False", "False -> True"):
        "only adds a line on stderr when a pattern fails to compile; remember_secrets compiles escaped literals",
    (_TS, "_CASELESS.log_errors = False", "False -> True"): _AT_IMPORT,
    (_TS, "_CASELESS.case_sensitive = False", "False -> True"): _AT_IMPORT,
    (_TS, '(rf"{_KEY_BEGIN}(?:[\\s\\S]*?{_KEY_END}|[\\s\\S]*)", "[REDACTED PRIVATE KEY]", False),   # unterminated: to the end',
     "False -> True"): _AT_IMPORT,
    (_TS, '(r"\\b(?:xox[abposrce]|xapp)-[A-Za-z0-9-]{8,500}", REDACTED, False),                  # Slack', "False -> True"):
        _AT_IMPORT,
    (_TS, '(r"\\bhf_[A-Za-z0-9]{20,200}", REDACTED, False),                                      # Hugging Face',
     "False -> True"): _AT_IMPORT,
    (_TS, '(r"\\bgh[pousr]_[A-Za-z0-9]{20,255}", REDACTED, False),                               # GitHub',
     "False -> True"): _AT_IMPORT,
    (_TS, '(r"\\bgithub_pat_[A-Za-z0-9_]{20,255}", REDACTED, False),', "False -> True"): _AT_IMPORT,
    (_TS, '(r"\\b(?:AKIA|ASIA)[0-9A-Z]{16}\\b", REDACTED, False),                                 # AWS access key id',
     "False -> True"): _AT_IMPORT,
    (_TS, 'r"\\1" + REDACTED, True),', "True -> False"): _AT_IMPORT,   # the authorization and the name=value rules
    (_TS, '(r"(\\bbearer\\s{1,5})[A-Za-z0-9._~+/=-]{8,1000}", r"\\1" + REDACTED, True),', "True -> False"): _AT_IMPORT,
    (_TS, 'return f"\\\\x{code:02x}" if code < 0x100 else f"\\\\u{code:04x}"', "< -> <="):
        "U+0100 is no control character: it never reaches _escape",
    (_TS, 'return f"\\\\x{code:02x}" if code < 0x100 else f"\\\\u{code:04x}"', "256 -> 257"):
        "U+0100 is no control character: it never reaches _escape",
    (_TS, "exact = sorted((v for v in _known if len(v) < MIN_FOLDED), key=len, reverse=True)", "< -> <="):
        "an 8-character value listed as written too: its case-folded form, listed first, matches it anyway",
    ("engine/core/lock.py", "os.ftruncate(fd, 0)", "0 -> 1"):
        "the byte kept is overwritten at once: the pid line written next at offset 0 is always longer than 1 byte",
    ("engine/process/trainer_control.py",
     "LAUNCH_SPACE_WAIT_S = 60.0   # a relaunch onto a full run folder waits this long for space, then fails cleanly",
     "60.0 -> 61.0"): "a full disk waited for 61 s instead of 60: the same launch or the same failure, one second later",
    ("engine/process/trainer_control.py", "if not passing(error) or time.monotonic() >= deadline:", ">= -> >"):
        "differs only when the clock reads the deadline to the nanosecond: one more try, then the same outcome",
    ("engine/process/trainer_control.py", "time.sleep(0.5)", "0.5 -> 1.5"):
        "the pause between two tries on a full disk: the same launch, a second later",
    (_DU, "mask = os.umask(0)   # the only portable way to read it; done once, at import, before any thread", "0 -> 1"):
        "os.umask returns the old mask whatever the new one, and the next line puts the old one back",
    (_DU, "shutil.copyfileobj(src, dst, 1 << 20)", "1 -> 2"): "the copy's buffer size: the same bytes are compressed",
    (_DU, "shutil.copyfileobj(src, dst, 1 << 20)", "20 -> 21"): "the copy's buffer size: the same bytes are compressed",
    (_DU, "path.unlink(missing_ok=True)", "True -> False"):
        "the file was seen by is_file() just before: only another process removing it in between tells them apart",
})

# engine/checkpoints

_SDK_CAP = "no sdk line pattern matches a line over 4112 characters (16 + 4096), so MAX_LINE's exact value only bounds the work"
EQUIVALENT.update({
    ("engine/trainers/script/lines.py", "MAX_LINE = 8192   # a longer line is no sdk line: never run a regex over megabytes of one line",
     "8192 -> 8193"): _SDK_CAP,
    ("engine/trainers/script/lines.py", 'if len(line) > MAX_LINE or not line.startswith("runbook: "):', "> -> >="): _SDK_CAP,
    ("engine/trainers/script/lines.py", 'if len(line) > MAX_LINE or not line.startswith("runbook: "):', "or -> and"):
        "a fast path: every pattern starts with '^runbook: ' and none matches over 4112 characters, so what it skips matches nothing",
    ("engine/trainers/script/lines.py", "if len(line) <= MAX_LINE and (m := SAVING.match(line)):", "<= -> <"): _SDK_CAP,
    ("engine/checkpoints/out_dir_claim.py",
     "why = error.messages[0] if isinstance(error, SourceError) else (error.strerror or str(error))", "or -> and"):
        "read_json_record turns every OSError but FileNotFoundError (caught above) into a SourceError: the arm is defensive",
    ("engine/checkpoints/out_dir_claim.py",
     'record = json.dumps(marker_record(self.out_dir, self.folder, self.config, mine), indent=1) + "\\n"', "1 -> 2"):
        "the marker is read back as JSON: its indentation changes none of its fields",
    ("engine/checkpoints/retention.py", "self._verified_seen = 0   # checkpoints verified when after_new_saves last looked",
     "0 -> 1"): "a first look at 0 or 1 verified returns None either way (1 <= keep_last_k + 1 for every k >= 0) "
                "and leaves the count seen the same",
    ("engine/checkpoints/manifest.py", "need_sha = want_digests or (manifest is not None and resume_file.name in manifest)",
     "or -> and"): "need_sha only spares a second read: sha() falls back to sha256_file, the same digest",
    ("engine/checkpoints/manifest.py", "need_sha = want_digests or (manifest is not None and resume_file.name in manifest)",
     "in -> not in"): "need_sha only spares a second read: sha() falls back to sha256_file, the same digest",
    ("engine/checkpoints/manifest.py",
     'data = json.dumps({"format": 1, "step": ckpt.step, "created_utc": created, "files": files}, indent=1)', "1 -> 2 #1"):
        "the manifest is read back as JSON: its indentation changes none of its fields",
    ("engine/checkpoints/last_link.py", 'tmp = out_dir / f"{own_tmp_prefix(out_dir)}last-{uuid.uuid4().hex[:12]}"', "12 -> 13"):
        "the temp link's random part, 12 or 13 hex digits: it is renamed away at once, the name is never read",
    ("engine/checkpoints/last_link.py", "tmp.unlink(missing_ok=True)", "True -> False"):
        "the temp link was made just before the rename that failed: it exists, missing_ok never matters",
    ("engine/checkpoints/pruning.py",
     'trash = out_dir / f"{own_tmp_prefix(out_dir)}prune-{c.path.name}-{uuid.uuid4().hex[:8]}"', "8 -> 9"):
        "the trash folder's random part, 8 or 9 hex digits: it is deleted at once, the name is never read",
    ("engine/checkpoints/catalog.py",
     'self.journal.append("verified", forced=force, bad=bad, seconds=round(time.monotonic() - started, 3), **read)', "3 -> 4"):
        "a duration's fourth decimal: no test can pin a timing, and nothing reads it but people",
    ("engine/checkpoints/catalog.py", "return path.stat().st_size", "return None"):
        "prune sizes only partial saves, which plan_cleanup takes from folders only: the file arm is never taken",
})

# engine/watch/incident_runner and engine/trainers/{hf,script}
_FIRST_PROGRESS = "if tracker.progress_since_launch > 0 and tracker.last_progress_time is not None:"
EQUIVALENT.update({
    # the tracker sets last_progress_time and counts progress_since_launch in one on_event, and new_launch resets
    # both (engine/observe/observer.py): last_progress_time is not None exactly when progress_since_launch >= 1
    ("engine/watch/incident_runner.py", _FIRST_PROGRESS, "and -> or"):
        "the tracker's two fields are set and reset together: either part alone gives the same answer",
    ("engine/watch/incident_runner.py", _FIRST_PROGRESS, "> -> >="):
        "progress_since_launch 0 comes with last_progress_time None (reset together): False either way",
    ("engine/trainers/hf/layout.py",
     'super().__init__("checkpoint-", MODEL, 0, FILES, required_files=("trainer_state.json",), patterns=PATTERNS)',
     "0 -> 1"): "a zero-padded width of 1 pads nothing: every step has at least one digit (checkpoint-4 either way)",
    ("engine/trainers/hf/settings.py", 'return item[2:].split("=", 1)[0].replace("-", "_")', "1 -> 2"):
        "the part before the first '=' is the same whatever the number of splits",
    ("engine/trainers/script/formats.py", "CHUNK = 1 << 20",
     "1 -> 2"): "CHUNK is only how much one read takes: every check and digest reads the whole file in any size",
    ("engine/trainers/script/formats.py", "CHUNK = 1 << 20",
     "20 -> 21"): "CHUNK is only how much one read takes: every check and digest reads the whole file in any size",
    ("engine/trainers/script/formats.py", 'return f"{path.name}: member {name}: its compressed data is corrupt ({str(error)[:80]})"',
     "80 -> 81"): "zlib's inflate messages are at most 71 characters ('Error -3 while decompressing data: ...'): never cut",
    ("engine/trainers/script/launch.py", 'config_file.write_text(json.dumps({"argv": argv, "hyperparameters": hyper}, indent=1))',
     "1 -> 2"): "launch.json's indentation: it is read as JSON, by people and json.loads alike",
    ("engine/trainers/script/template.py", "return m.group(0)[0]",
     "0 -> 1 #1"): "'{{'[1] and '}}'[1] are the same brace as [0]",
    ("engine/trainers/script/weights.py", "scalar = numpy.float64(0).__reduce__()[0]               # numpy._core.multiarray.scalar",
     "0 -> 1"): "numpy.float64(1) reduces with the same function (numpy's scalar) as float64(0)",
    ("engine/trainers/script/weights.py", "reconstruct = numpy.zeros(0).__reduce__()[0]            # numpy._core.multiarray._reconstruct",
     "0 -> 1"): "numpy.zeros(1) reduces with the same function (_reconstruct) as zeros(0)",
    ("engine/trainers/script/weights.py", "scanned += 1",
     "1 -> 2"): "only whether any floating tensor was scanned is read (scanned is never shown)",
})

_FLIPS = {ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq], ast.Lt: [ast.GtE, ast.LtE], ast.LtE: [ast.Gt, ast.Lt],
          ast.Gt: [ast.LtE, ast.GtE], ast.GtE: [ast.Lt, ast.Gt], ast.In: [ast.NotIn], ast.NotIn: [ast.In],
          ast.Is: [ast.IsNot], ast.IsNot: [ast.Is]}
_SYMBOL = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.In: "in",
           ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


@dataclass
class Mutant:
    module: str          # the MODULES key
    path: str            # the file, relative to the repository
    index: int           # the site's number in this file (source order)
    line: int
    what: str            # e.g. "< -> <=" or "return None"
    outcome: str = ""    # "killed", "timeout" (counts as killed), "survived"
    equivalent: str = "" # why this mutant cannot change behaviour (EQUIVALENT), then not in the score


# --- sites: pure functions of a syntax tree ----------------------------------------------------------------


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (a constant there is not behaviour)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        for ann in [getattr(node, "annotation", None), getattr(node, "returns", None)]:
            if ann is not None:
                found.update(id(n) for n in ast.walk(ann))
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            found.add(id(body[0].value))
    return found


def _mutable_region(tree: ast.Module) -> list[ast.AST]:
    """The statements whose nodes may be mutated: function bodies (at module level or in a class) and
    module-level assignments."""
    region: list[ast.AST] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Assign)):
            region.append(stmt)
        elif isinstance(stmt, ast.ClassDef):
            region.extend(s for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return region


def sites(tree: ast.Module) -> list[tuple[ast.AST, int, str]]:
    """(node, variant, description) for every mutation, in a deterministic order."""
    skip = _annotation_nodes(tree) | _docstrings(tree)
    found: list[tuple[ast.AST, int, str]] = []
    for stmt in _mutable_region(tree):
        nodes = [n for n in ast.walk(stmt) if id(n) not in skip]
        decorators = {id(n) for d in getattr(stmt, "decorator_list", []) for n in ast.walk(d)}
        for node in sorted((n for n in nodes if id(n) not in decorators and hasattr(n, "lineno")),
                           key=lambda n: (n.lineno, n.col_offset, type(n).__name__)):
            if isinstance(node, ast.Compare):
                for i, op in enumerate(node.ops):
                    for j, new in enumerate(_FLIPS.get(type(op), [])):
                        found.append((node, i * 10 + j, f"{_SYMBOL[type(op)]} -> {_SYMBOL[new]}"))
            elif isinstance(node, ast.BoolOp):
                found.append((node, 0, "and -> or" if isinstance(node.op, ast.And) else "or -> and"))
            elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
                found.append((node, 0, f"{node.value!r} -> {node.value + 1!r}"))
            elif isinstance(node, ast.Constant) and type(node.value) is bool:
                found.append((node, 0, f"{node.value} -> {not node.value}"))
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                found.append((node, 0, "not x -> x"))
            elif isinstance(node, ast.Return) and node.value is not None and not (
                    isinstance(node.value, ast.Constant) and node.value.value is None):
                found.append((node, 0, "return None"))
    return found


def mutate(tree: ast.Module, index: int) -> tuple[ast.Module, ast.AST]:
    """A copy of the tree with site `index` mutated, and the top-level statement that holds it."""
    tree = copy.deepcopy(tree)
    node, variant, _ = sites(tree)[index]
    if isinstance(node, ast.Compare):
        i, j = divmod(variant, 10)
        node.ops[i] = _FLIPS[type(node.ops[i])][j]()
    elif isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif isinstance(node, ast.Constant):
        node.value = (not node.value) if type(node.value) is bool else node.value + 1
    elif isinstance(node, ast.UnaryOp):
        _replace(tree, node, node.operand)
    elif isinstance(node, ast.Return):
        node.value = ast.Constant(None)
    holder = next(s for s in tree.body if any(n is node for n in ast.walk(s)))
    return ast.fix_missing_locations(tree), holder


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
            elif isinstance(value, list):
                value[:] = [new if v is old else v for v in value]


# --- applying a mutant (in the forked child only) ----------------------------------------------------------


def _codes(code: types.CodeType, into: dict[str, types.CodeType]) -> dict[str, types.CodeType]:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            into.setdefault(const.co_qualname, const)
            _codes(const, into)
    return into


def apply(module: types.ModuleType, path: Path, tree: ast.Module, index: int) -> bool:
    """Put mutant `index` of `module` in place in this process; False when it has nothing to act on."""
    mutated, holder = mutate(tree, index)
    if isinstance(holder, ast.Assign):   # a module constant: rebind it (functions read module globals)
        exec(compile(ast.Module([holder], []), str(path), "exec"), module.__dict__)
        return True
    new = _codes(compile(mutated, str(path), "exec"), {})
    patched = 0
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and obj.__code__.co_filename == str(path):
            replacement = new.get(obj.__code__.co_qualname)
            if replacement is not None and replacement is not obj.__code__ and replacement != obj.__code__:
                obj.__code__ = replacement
                patched += 1
    return patched > 0


# --- running ----------------------------------------------------------------------------------------------


def copy_repo(into: Path) -> Path:
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"), symlinks=True)
        elif source.exists():
            shutil.copy2(source, into / name)
    return into


def pytest_args(tests: list[str]) -> list[str]:
    return [*tests, "-x", "-q", "-m", "not slow", "-p", "no:cacheprovider", "-p", "no:randomly",
            "--no-header", "-o", "addopts=", "--tb=no"]


NOT_APPLIED = 7   # the child's exit status when the mutant changed no code object (then it is not counted)


def run_child(body, timeout: float) -> str:
    """Fork; the child runs body() (an exit status) with its output discarded: 'ok', 'failed', 'timeout' or
    'not applied'."""
    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            sys.stdout, sys.stderr = io.TextIOWrapper(io.FileIO(1, "w")), io.TextIOWrapper(io.FileIO(2, "w"))
            code = body()
        except BaseException:   # noqa: BLE001 - whatever the mutant did, the child only reports
            code = 3
        os._exit(code if isinstance(code, int) else 3)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return "ok" if code == 0 else "not applied" if code == NOT_APPLIED else "failed"
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.02)


def _import_once(tests: list[str]) -> None:
    """The tests and what they import, loaded in this process before any fork: each child then pays only for
    running them (pytest reuses a module already in sys.modules)."""
    import importlib

    importlib.import_module("tests.conftest")
    for test in tests:
        importlib.import_module(test.removesuffix(".py").replace("/", "."))


def run_module(key: str, copy_root: Path, limit: int | None, timeout_floor: float,
               with_mut_tests: bool = True) -> tuple[list[Mutant], float]:
    """Every mutant of one module (the first `limit` with a limit), and the unmutated tests' seconds."""
    import importlib

    import pytest

    files, tests = MODULES[key]
    if with_mut_tests:
        tests = [*tests, *sorted(str(p.relative_to(copy_root)) for p in (copy_root / "tests" / "unit").glob(f"test_mut_{key}*.py"))]
    args = pytest_args(tests)
    _import_once(tests)
    started = time.monotonic()
    baseline = run_child(lambda: int(pytest.main(args)), timeout=600)
    seconds = time.monotonic() - started
    if baseline != "ok":
        raise SystemExit(f"the unmutated tests of {key} do not pass in the copy ({baseline}): "
                         f"cd {copy_root} && python -m pytest {' '.join(args)}")
    timeout = max(timeout_floor, 3 * seconds + 5)
    mutants: list[Mutant] = []
    for rel in files:
        path = copy_root / rel
        text = path.read_text()
        tree, lines, seen = ast.parse(text), text.splitlines(), {}
        name = rel.removesuffix(".py").replace("/", ".")
        module = importlib.import_module(name)
        for index, (node, _variant, what) in enumerate(sites(tree)):
            if limit is not None and len(mutants) >= limit:
                return mutants, seconds
            source_line = lines[node.lineno - 1].strip()
            nth = seen.get((node.lineno, what), 0)
            seen[(node.lineno, what)] = nth + 1
            reason = EQUIVALENT.get((rel, source_line, what + (f" #{nth}" if nth else "")), "")
            mutant = Mutant(key, rel, index, node.lineno, what + (f" #{nth}" if nth else ""), equivalent=reason)

            def body(index=index):
                if not apply(module, path, tree, index):
                    return NOT_APPLIED
                return int(pytest.main(args))

            result = run_child(body, timeout)
            mutant.outcome = {"ok": "survived", "failed": "killed", "timeout": "timeout", "not applied": "not applied"}[result]
            if mutant.outcome != "not applied":
                mutants.append(mutant)
    return mutants, seconds


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "| --- |" + " ---: |" * (len(headers) - 1)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def score(mutants: list[Mutant]) -> tuple[int, int, int]:
    """(killed, counted, equivalent): the score is killed / counted; equivalent mutants are not counted."""
    counted = [m for m in mutants if not m.equivalent]
    return sum(m.outcome in ("killed", "timeout") for m in counted), len(counted), len(mutants) - len(counted)


def score_rows(mutants: list[Mutant]) -> list[list[str]]:
    rows = []
    for key in dict.fromkeys(m.module for m in mutants):
        killed, counted, equivalent = score([m for m in mutants if m.module == key])
        rows.append([key, str(counted + equivalent), str(equivalent), str(killed), str(counted - killed),
                     f"{100 * killed / counted:.0f}%" if counted else "-"])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=sorted(MODULES), help="only these modules (repeatable)")
    parser.add_argument("--smoke", action="store_true", help="6 mutants of exit_codes: the machinery works (< 60 s)")
    parser.add_argument("--survivors", action="store_true", help="list every surviving mutant")
    parser.add_argument("--without-mut-tests", action="store_true",
                        help="leave out tests/unit/test_mut_*.py: the score before they were written")
    parser.add_argument("--json", type=Path, help="write every mutant's outcome here")
    parser.add_argument("--root", type=Path, help="scratch folder for the repository copy (default: a temporary one)")
    parser.add_argument("--timeout", type=float, default=20.0, help="least seconds a mutant's tests may run")
    args = parser.parse_args(argv)
    keys = ["exit_codes"] if args.smoke else (args.module or list(MODULES))
    if args.root:
        args.root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="mutation-", dir=args.root))
    copy_root = copy_repo(scratch / "repo")
    os.chdir(copy_root)
    sys.path.insert(0, str(copy_root))
    for name in [n for n in sys.modules if n.split(".")[0] in ("engine", "runbook", "tests", "benchmarks")]:
        del sys.modules[name]   # the copy's modules, not the working tree's, are the ones mutated and tested
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    started = time.monotonic()
    mutants: list[Mutant] = []
    try:
        for key in keys:
            found, seconds = run_module(key, copy_root, 6 if args.smoke else None, args.timeout, not args.without_mut_tests)
            mutants += found
            killed, counted, equivalent = score(found)
            print(f"{key}: {killed}/{counted} killed, {equivalent} equivalent (unmutated tests {seconds:.1f} s)", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(table(["module", "mutants", "equivalent", "killed", "survived", "score (killed / not equivalent)"],
                score_rows(mutants)))
    print(f"\n{len(mutants)} mutants in {time.monotonic() - started:.0f} s; docs/benchmarks.md not written")
    if args.survivors or args.smoke:
        for m in mutants:
            if m.outcome == "survived":
                print(f"survived: {m.path}:{m.line} {m.what}" + (f" (equivalent: {m.equivalent})" if m.equivalent else ""))
    if args.json:
        args.json.write_text(json.dumps([asdict(m) for m in mutants], indent=1))
    if args.smoke:
        assert len(mutants) == 6 and all(m.outcome for m in mutants), mutants
    return 0


if __name__ == "__main__":
    sys.exit(main())
