"""litgpt's pretraining imports without transformers: ~2 s less of every trainer start (launch, resume, each rank).

litgpt.pretrain uses one metric of torchmetrics (RunningMean), but importing torchmetrics imports its text and
multimodal metrics, and those import transformers at module level when it is installed (BERTScore, InfoLM,
CLIPScore: `if _TRANSFORMERS_GREATER_EQUAL_4_4: from transformers import AutoModel`): measured 4.5 -> 6.7 s of CPU
for `import litgpt.pretrain` with transformers 5.3 installed (the hf extra). Those metrics are never used by litgpt's
pretraining, so in runbook's litgpt trainer process torchmetrics is told transformers is absent: the flags it
reads are set False as its `utilities.imports` module finishes executing, before any metric module reads them.
Nothing else changes; with another torchmetrics (no such flags) nothing is done. benchmarks/bench_litgpt_import.py
measures it. Importing this module installs it (a warm spare imports it first: launch.py's WARM_IMPORTS).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

FLAGS_MODULE = "torchmetrics.utilities.imports"
TRANSFORMERS_FLAGS = ("_TRANSFORMERS_AVAILABLE", "_TRANSFORMERS_GREATER_EQUAL_4_4", "_TRANSFORMERS_GREATER_EQUAL_4_10")


class _TransformersFlagsOff(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for torchmetrics' flags module, the real spec with its execution followed by
    setting the transformers flags False. Removes itself at that first use (one module, imported once)."""

    def find_spec(self, name, path=None, target=None):
        if name != FLAGS_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            for flag in TRANSFORMERS_FLAGS:
                if hasattr(module, flag):
                    setattr(module, flag, False)

        loader.exec_module = exec_module
        return spec


def without_transformers_in_torchmetrics() -> None:
    """Install the finder, unless torchmetrics is imported already (then it is too late, and harmless)."""
    if FLAGS_MODULE in sys.modules or any(isinstance(f, _TransformersFlagsOff) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _TransformersFlagsOff())


def import_pretrain():
    """litgpt.pretrain, imported the lean way."""
    without_transformers_in_torchmetrics()
    import litgpt.pretrain as pretrain

    return pretrain


without_transformers_in_torchmetrics()
