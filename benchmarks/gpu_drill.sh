#!/usr/bin/env bash
# The GPU part of issue 7, on a machine with CUDA:
#   1. the OOM drill for real: a model sized to the card, a micro-batch far too large for it, a real
#      `torch.OutOfMemoryError: CUDA out of memory`; runbook must halve the micro-batch until it fits
#      and finish with the planned optimizer steps and tokens. Checked, not just run.
#   2. the chaos run (benchmarks/bench_chaos.py --quick --device cuda) on the GPU. Its start-time OOM
#      relies on an address-space limit, which a CUDA process cannot run under, so on the GPU the real
#      CUDA OOM of step 1 stands for it.
#
# Usage (from anywhere; it works in the repository root):
#   bash benchmarks/gpu_drill.sh                  # both parts; results under $OUT (or /tmp/runbook-gpu-drill)
#   bash benchmarks/gpu_drill.sh --drill-only     # part 1 only
#   bash benchmarks/gpu_drill.sh --fetch-wheels   # on a machine WITH pip access and WITHOUT a GPU: download the
#                                                 # wheels the GPU image lacks into .whl/ (for the device tool's carry)
#   GPU_DRILL_CPU_SMOKE=1 bash benchmarks/gpu_drill.sh --drill-only
#                                                 # plumbing check without a GPU: the same drill on the CPU, the
#                                                 # tiny model under a 1160 MB address-space limit (not a GPU result)
#
# Exit codes: 0 all checks passed; 2 no CUDA GPU visible; 3 a package is missing; 1 a check failed.
# Python: $PYTHON, else the venv's python when there is one, else python3 (on the GPU image, python3 holds torch).
# Wheels: if .whl/ exists (carried), they are installed with --no-deps into /tmp/site first.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
RESULTS=${OUT:-/tmp/runbook-gpu-drill}
WORK=${GPU_DRILL_WORK:-/tmp/runbook-gpu-drill-work}
SMOKE=${GPU_DRILL_CPU_SMOKE:-0}
PART=all
for arg in "$@"; do
  case $arg in
    --drill-only) PART=drill ;;
    --fetch-wheels) PART=fetch ;;
    *) echo "unknown option: $arg" >&2; exit 64 ;;
  esac
done

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x "$REPO/.venv/bin/python" ] && [ "$PART" = fetch -o "$SMOKE" = 1 ]; then PY=$REPO/.venv/bin/python
else PY=python3
fi

# The packages the GPU image lacks (its list: /work/.library/device/KINDS.md), at this venv's versions.
WHEELS="litgpt litdata jsonargparse docstring-parser typeshed-client boto3 botocore s3transfer
jmespath obstore pydantic pydantic-core annotated-types typing-inspection APScheduler tzlocal ruamel.yaml slack-sdk
huggingface-hub"

if [ "$PART" = fetch ]; then
  mkdir -p .whl
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  for name in $WHEELS; do
    version=$("$PY" -c "from importlib.metadata import version; print(version('$name'))" 2>/dev/null) || {
      echo "skip $name: not installed here"; continue; }
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$name==$version" \
      || echo "FAILED: $name==$version (try another --platform manylinux_2_N_x86_64)"
  done
  ls -la .whl
  exit 0
fi

mkdir -p "$RESULTS" "$WORK"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  export PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

# --- self-checks -------------------------------------------------------------------------------
if [ "$SMOKE" != 1 ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_drill: no NVIDIA GPU visible (nvidia-smi missing or lists none). This script needs a CUDA machine;" >&2
    echo "gpu_drill: for a plumbing check without one: GPU_DRILL_CPU_SMOKE=1 bash benchmarks/gpu_drill.sh --drill-only" >&2
    exit 2
  fi
  if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_drill: $PY's torch sees no CUDA device (torch.cuda.is_available() is False)." >&2
    exit 2
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$RESULTS/gpu.txt"
fi
if ! "$PY" -c 'import litgpt, litdata, pydantic, ruamel.yaml, apscheduler, slack_sdk, jsonargparse, runbook.cli' 2>"$RESULTS/import-error.txt"; then
  echo "gpu_drill: a package runbook needs is missing for $PY:" >&2
  tail -1 "$RESULTS/import-error.txt" >&2
  echo "gpu_drill: carry wheels in .whl/ (bash benchmarks/gpu_drill.sh --fetch-wheels on a machine with pip access)" >&2
  exit 3
fi
if ! command -v litgpt >/dev/null 2>&1 && [ ! -x "$(dirname "$(command -v "$PY")")/litgpt" ]; then
  echo "gpu_drill: the litgpt command is not on PATH (runbook launches it)" >&2
  exit 3
fi

# --- 1. the OOM drill ---------------------------------------------------------------------------
echo "== 1. OOM drill ($([ "$SMOKE" = 1 ] && echo 'CPU smoke, not a GPU result' || echo CUDA))"
SMOKE=$SMOKE WORK=$WORK RESULTS=$RESULTS "$PY" - <<'PYEOF'
import json, math, os, shutil, subprocess, sys, time
from pathlib import Path

from benchmarks import common
from runbook.default_data import make_tokenizer

smoke = os.environ["SMOKE"] == "1"
work, results = Path(os.environ["WORK"]), Path(os.environ["RESULTS"])
root = work / "oom-drill"
if root.exists():
    shutil.rmtree(root)

if smoke:  # the tiny model under an address-space limit: only checks this script's plumbing
    block, shape = 64, {"n_layer": 2, "n_head": 2, "n_embd": 64, "intermediate_size": 172}
    start_mb, trainer = 256, {"device": "cpu", "memory_limit_mb": 1160}
    data_root = None
else:
    import torch
    total = torch.cuda.get_device_properties(0).total_memory
    # A model sized to the card: ~100M parameters (0.6 GB with AdamW in bf16), activations dominate.
    block, shape = 512, {"n_layer": 8, "n_head": 16, "n_embd": 1024, "intermediate_size": 2816}
    per_sequence = 48 * block * shape["n_embd"] * shape["n_layer"]          # rough bytes of activations
    start_mb = 2 ** math.ceil(math.log2(1.5 * total / per_sequence))      # about 1.5-3x too large
    trainer = {"device": "cuda", "precision": "bf16-true", "env": {"TORCHDYNAMO_DISABLE": "1"}}
    # Validation needs one batch of start_mb x (block + 1) tokens; the default corpus is too small.
    # The default corpus (top-level stdlib modules) is too small: take the whole stdlib tree, a
    # quarter of the files for validation, repeated until validation holds 5 MB.
    data_root = work / "data"
    if not (data_root / "tokenizer" / "tokenizer.json").exists():
        import sysconfig
        files = sorted(p for p in Path(sysconfig.get_paths()["stdlib"]).rglob("*.py") if 0 < p.stat().st_size <= 200_000)
        texts = {"train": [], "val": []}
        for i, path in enumerate(files[:4000]):
            texts["val" if i % 4 == 0 else "train"].append(path.read_text(encoding="utf-8", errors="replace"))
        for split, parts in texts.items():
            body = "\n\n".join(parts)
            while split == "val" and len(body) < 5_000_000:
                body += "\n\n" + body
            (data_root / "stdlib" / split).mkdir(parents=True, exist_ok=True)
            (data_root / "stdlib" / split / "shard-000.txt").write_text(body, encoding="utf-8")
        make_tokenizer(data_root / "stdlib", data_root / "tokenizer")

settings = {
    "micro_batch_size": start_mb, "batch_size": start_mb, "max_tokens": start_mb * block * 2, "save_interval": 1,
    "model": {"block_size": block, **shape},
    "trainer": {**trainer, "eval_interval": 100, "eval_iters": 1},
}
config = common.scratch_project(root, **settings)
if data_root is not None:  # point the scratch project at the bigger corpus
    text = config.read_text()
    for key, path in (("train_dir", data_root / "stdlib/train"), ("val_dir", data_root / "stdlib/val"),
                      ("tokenizer_dir", data_root / "tokenizer")):
        import re
        text = re.sub(rf"^(\s+{key}:).*$", rf"\1 {path}", text, flags=re.M)
    config.write_text(text)
loaded = common.load_run(config)
print(f"model: block {block}, {shape}; micro_batch_size {start_mb} = batch_size; max_tokens {settings['max_tokens']:,}")
started = time.time()
proc = common.start_watch(config, root / "watch.log")
try:
    code = proc.wait(timeout=480)
except subprocess.TimeoutExpired:
    common.stop(proc)
    code = "timeout"
wall = time.time() - started
incidents = common.incidents(loaded.run_dir)
progress = common.final_progress(loaded.out_dir)
final_mb = common.load_run(config).config.micro_batch_size
logs = sorted((loaded.run_dir / "logs").glob("trainer-*.log"))
oom_lines = [l for log in logs for l in log.read_text(errors="replace").splitlines()
             if "OutOfMemoryError" in l or "CUDA out of memory" in l or "can't allocate memory" in l]
report = {
    "smoke_cpu": smoke, "watch_exit": code, "wall_s": round(wall, 1), "start_micro_batch": start_mb,
    "final_micro_batch": final_mb, "incidents": [(i["playbook"], i["outcome"], i.get("config_changes")) for i in incidents],
    "final_progress": progress, "planned_tokens": settings["max_tokens"],
    "tokens": progress and progress["iter_num"] * final_mb * block, "oom_lines": oom_lines[:4],
    "runbook_seconds": [i.get("runbook_seconds") for i in incidents],
    "trainer_restart_seconds": [i.get("trainer_restart_seconds") for i in incidents],
}
checks = {
    "watch exited 0": code == 0,
    "at least one OOM incident, all recovered": bool(incidents) and all(i["playbook"] == "oom" and i["outcome"] == "recovered" for i in incidents),
    "the OOM was real (" + ("CPU allocator" if smoke else "CUDA out of memory") + ")": any(
        ("can't allocate memory" if smoke else "out of memory") in l for l in oom_lines),
    "micro-batch halved each time": [tuple(i["config_changes"]["micro_batch_size"]) for i in incidents]
        == [(start_mb >> k, start_mb >> (k + 1)) for k in range(len(incidents))],
    "planned optimizer steps (2)": bool(progress) and progress["step_count"] == 2,
    "planned tokens": report["tokens"] == settings["max_tokens"],
}
report["checks"] = checks
(Path(results) / "oom-drill.json").write_text(json.dumps(report, indent=1, default=str))
shutil.copy(root / "watch.log", Path(results) / "oom-drill-watch.log")
for name, ok in checks.items():
    print(f"  {'ok  ' if ok else 'FAIL'} {name}")
if not smoke:  # the GPU copy of docs/benchmarks.md travels back under $OUT; the lead merges the section
    gpu = (Path(results) / "gpu.txt").read_text().strip() if (Path(results) / "gpu.txt").exists() else "unknown GPU"
    rows = "\n".join(f"| {name} | {'met' if ok else '**missed**'} |" for name, ok in checks.items())
    common.write_section("GPU drill (CUDA OOM)", f"""Command: `bash benchmarks/gpu_drill.sh` on {gpu}; {common.machine()}.

Model block {block}, {shape}, bf16-true, TORCHDYNAMO_DISABLE=1; start micro_batch_size {start_mb} = batch_size,
2 optimizer steps. runbook ended at micro_batch_size {final_mb} after {len(incidents)} OOM incident(s) in
{wall:.0f} s: {report['incidents']}; runbook s {report['runbook_seconds']}, trainer restart s
{report['trainer_restart_seconds']}; first OOM line: `{(oom_lines or ['none'])[0][:150]}`.

| check | result |
| --- | --- |
{rows}""")
print(json.dumps({k: v for k, v in report.items() if k != "checks"}, default=str))
sys.exit(0 if all(checks.values()) else 1)
PYEOF
drill=$?

chaos=0
if [ "$PART" = all ]; then
  echo "== 2. chaos run on the GPU (bench_chaos.py --quick --device cuda)"
  "$PY" benchmarks/bench_chaos.py --quick --device cuda --write \
      --section "Chaos run (GPU)" --root "$WORK/chaos" 2>&1 | tee "$RESULTS/chaos.txt"
  chaos=${PIPESTATUS[0]}
  cp docs/benchmarks.md "$RESULTS/benchmarks-gpu.md" 2>/dev/null
  cp "$WORK/chaos/results.json" "$RESULTS/chaos-results.json" 2>/dev/null
fi
echo "== results in $RESULTS: drill exit $drill, chaos exit $chaos"
[ "$drill" = 0 ] && [ "$chaos" = 0 ]
