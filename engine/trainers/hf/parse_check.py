"""`runbook check` for kind hf-trainer: run the user's own argument parser (runbook/hf_parse_probe.py) on the argv
a launch would get, and refuse what would not reach the trainer as the run config says (an abbreviation,
a default the script forces, a parser that rejects runbook's flags). `compare` is pure."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).resolve().parents[3] / "runbook" / "hf_parse_probe.py"
PROBE_TIMEOUT_S = 180.0
# TrainingArguments field -> (the template value that sets it, the run config key people change)
EXPECTED = {"output_dir": ("out_dir", "out_dir"), "per_device_train_batch_size": ("micro_batch_size", "micro_batch_size"),
            "gradient_accumulation_steps": ("grad_accum", "batch_size / micro_batch_size"),
            "learning_rate": ("lr", "lr"), "max_steps": ("max_steps", "max_tokens"),
            "save_steps": ("save_interval", "save_interval"), "seed": ("seed", "seed")}


def _same(got: object, want: object) -> bool:
    """PURE. `got` (the parser's JSON) is `want` (a template value): the same number, else the same path or text."""
    if isinstance(got, (int, float, str)) and isinstance(want, (int, float, str)):
        try:
            return math.isclose(float(got), float(want), rel_tol=1e-9)
        except ValueError:
            pass
    return str(Path(str(got))) == str(Path(str(want)))


def compare(parsed: dict, values: dict) -> list[str]:
    """PURE. Each managed value the script's parser did not take as runbook passed it."""
    problems = []
    for field, (name, key) in EXPECTED.items():
        if field in parsed and not _same(parsed[field], values[name]):
            problems.append(f"{field} is {parsed[field]!r} where runbook passes {values[name]!r} (the run config's {key})")
    if parsed.get("save_only_model"):
        problems.append("save_only_model is on: every resume would restart the optimizer and the lr schedule")
    if parsed.get("save_total_limit"):
        problems.append(f"save_total_limit is {parsed['save_total_limit']}: HF would delete checkpoints runbook "
                        "keeps (keep_last_k prunes, only what was announced)")
    return problems


def probe(argv: list[str], cwd: Path, env: dict) -> dict:
    """The script's parsed TrainingArguments ({"parsed": ...}) or why there are none ({"error": ...})."""
    head = argv.index(next(a for a in argv if a.endswith(".py")))
    try:
        done = subprocess.run([sys.executable, str(PROBE), *argv[head:]], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"the script did not parse its arguments within {PROBE_TIMEOUT_S:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    try:
        result = json.loads(lines[-1]) if lines else {}
    except ValueError:
        result = {}
    if "error" in result or not result:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return {"error": f"{result.get('error', f'the probe exited {done.returncode}')}: {tail}"}
    return result
