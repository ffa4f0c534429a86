"""litgpt's pretraining imports without transformers or matplotlib: ~2.5 s less of every trainer start (launch,
resume, each rank).

litgpt.pretrain uses one metric of torchmetrics (RunningMean), but importing torchmetrics imports its text and
multimodal metrics, and those import transformers at module level when it is installed (BERTScore, InfoLM,
CLIPScore: `if _TRANSFORMERS_GREATER_EQUAL_4_4: from transformers import AutoModel`): measured 4.5 -> 6.7 s of CPU
for `import litgpt.pretrain` with transformers 5.3 installed (the hf extra). Those metrics are never used by litgpt's
pretraining, so in runbook's litgpt trainer process torchmetrics is told transformers is absent: the flags it
reads are set False as its `utilities.imports` module finishes executing, before any metric module reads them.
The same holds for matplotlib (a runbook dependency, for its reports): torchmetrics.utilities.plot imports
matplotlib.pyplot and its axes at module level when it is installed (`if _MATPLOTLIB_AVAILABLE: import matplotlib...`),
~0.5 CPU s of every start, for `Metric.plot()`, which litgpt never calls; its flags are set False the same way.
Nothing else changes; with another torchmetrics (no such flags) nothing is done. benchmarks/bench_litgpt_import.py
measures it. Importing this module installs it (a warm spare imports it first: launch.py's WARM_IMPORTS).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

FLAGS_MODULE = "torchmetrics.utilities.imports"
TRANSFORMERS_FLAGS = ("_TRANSFORMERS_AVAILABLE", "_TRANSFORMERS_GREATER_EQUAL_4_4", "_TRANSFORMERS_GREATER_EQUAL_4_10")
PLOTTING_FLAGS = ("_MATPLOTLIB_AVAILABLE", "_SCIENCEPLOT_AVAILABLE")   # read by torchmetrics.utilities.plot
FLAGS_OFF = TRANSFORMERS_FLAGS + PLOTTING_FLAGS


class _UnusedFlagsOff(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for torchmetrics' flags module, the real spec with its execution followed by
    setting the transformers and plotting flags False. Removes itself at that first use (one module, imported once)."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name != FLAGS_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            for flag in FLAGS_OFF:
                if hasattr(module, flag):
                    setattr(module, flag, False)

        loader.exec_module = exec_module
        return spec


def without_unused_imports_in_torchmetrics() -> None:
    """Install the finder, unless torchmetrics is imported already (then it is too late, and harmless)."""
    if FLAGS_MODULE in sys.modules or any(isinstance(f, _UnusedFlagsOff) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _UnusedFlagsOff())


def import_pretrain() -> ModuleType:
    """litgpt.pretrain, imported the lean way (no transformers, no matplotlib)."""
    without_unused_imports_in_torchmetrics()
    import litgpt.pretrain as pretrain

    return pretrain


without_unused_imports_in_torchmetrics()
