"""runbook's litgpt trainer process imports litgpt.pretrain without transformers or matplotlib
(engine/trainers/litgpt/lean_imports.py): torchmetrics, told they are absent, skips the metrics and the plotting
module that would import them, and the one metric litgpt uses still works. Real imports in fresh interpreters (a process's imports cannot be undone), with transformers installed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from tests.conftest import REPO, require_capability

PROBE = """
import json, sys
{setup}
import litgpt.pretrain
import torch
from torchmetrics.aggregation import RunningMean
from torchmetrics.utilities import imports as flags
metric = RunningMean(window=2)
for value in (1.0, 2.0, 4.0):
    metric.update(torch.tensor(value))
print(json.dumps({{"transformers": "transformers" in sys.modules, "mean": float(metric.compute()),
                  "flag": bool(flags._TRANSFORMERS_GREATER_EQUAL_4_4), "matplotlib": "matplotlib" in sys.modules,
                  "plot_flag": bool(flags._MATPLOTLIB_AVAILABLE)}}))
"""


def probe(setup: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup)], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_entry_imports_litgpt_without_transformers_or_matplotlib_and_its_running_mean_still_works():
    if importlib.util.find_spec("transformers") is None:   # the hf extra: what makes the import heavy
        require_capability("transformers (the hf extra, scripts/setup.sh installs it) is not installed")
    # The entry's own start (litgpt's CLI asked for its help: it imports everything a launch does, then exits).
    lean = probe("from engine.trainers.litgpt import entry\nsys.argv = ['entry', 'pretrain', '--help']\n"
                 "try:\n    entry.main(sys.argv[1:])\nexcept SystemExit:\n    pass")
    plain = probe("")
    assert plain["transformers"] and plain["flag"]            # what litgpt's import costs without runbook's entry
    assert not lean["transformers"] and not lean["flag"]
    assert plain["matplotlib"] and plain["plot_flag"]          # a runbook dependency (its reports): always installed
    assert not lean["matplotlib"] and not lean["plot_flag"]
    assert lean["mean"] == plain["mean"] == 3.0               # RunningMean over the last 2 values, as litgpt logs it


def test_a_warm_spare_imports_the_lean_way_first():
    from engine.trainers.litgpt.launch import WARM_IMPORTS

    assert WARM_IMPORTS[0] == "engine.trainers.litgpt.lean_imports"
    lean = probe("import engine.trainers.litgpt.lean_imports")   # importing it is what installs it
    assert not lean["transformers"] and not lean["matplotlib"]


def test_the_preflight_parse_imports_the_lean_way_first():
    """`runbook check` and each launch's preflight parse run litgpt's CLI in a fresh interpreter (preflight.PROBE):
    its first statement installs the same finder, so the parse pays neither import."""
    from engine.trainers.litgpt.preflight import PROBE

    statements = [line for line in PROBE.splitlines() if line.strip()]
    assert statements[0] == "import engine.trainers.litgpt.lean_imports", statements[:3]
