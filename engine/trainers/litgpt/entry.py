"""runbook's entry into litgpt pretraining: litgpt's own CLI, loop, data and checkpoint format, run
from a module of ours so that runbook can add what litgpt 0.5.13 lacks around it.

    python -m engine.trainers.litgpt.entry pretrain --config FILE

The argv after the module name is litgpt's (`litgpt pretrain --config FILE`), unchanged, because
two parts of litgpt and Lightning re-read it: `save_hyperparameters` re-parses sys.argv at every
save (so pretrain.setup() cannot be called directly), and Fabric starts ranks > 0 as
`python -m <this module> <the same argv>`. litgpt's CLI runs under the `__main__` guard: litdata's
spawned workers import this module again and must not re-run the setup (EADDRINUSE on DDP).

The order of start-up, each step at one named place:
1. notice_save.install_handlers(): the notice signals (RUNBOOK_NOTICE_SIGNALS) are caught from the
   first milliseconds; a notice before the training loop runs ends the process at once (no step to lose).
2. import litgpt.pretrain (torch, lightning: most of a start's seconds), without transformers (lean_imports.py).
3. prepare_ranks(): the multi-rank hook (engine/trainers/litgpt/ranks.py, issue 15): it may replace
   litgpt's strategy choice or write per-rank heartbeats before litgpt constructs its Fabric.
4. notice_save.attach(pretrain): the save-on-notice guard at litgpt's optimizer-step boundary.
5. data_skip.attach(pretrain): a resumed loader moved past the data windows runbook skips (RUNBOOK_DATA_SKIP).
6. hyperparameters.parse_once(pretrain): each checkpoint's hyperparameters.yaml from one parse of the argv,
   not litgpt's re-parse at every save (hyperparameters.py says why that is the same file).
7. litgpt's CLI (as litgpt.__main__.main sets it up, for its pretrain command) with the argv above.
"""

from __future__ import annotations

import sys
from types import ModuleType

from engine.trainers.litgpt import data_skip, hyperparameters, lean_imports, notice_save


def prepare_ranks() -> None:
    """The multi-rank hook. engine/trainers/litgpt/ranks.py, when present, defines `prepare()`: it runs
    here, after litgpt.pretrain is imported and before litgpt's CLI builds the Fabric, in every rank
    (Fabric re-runs this module for ranks > 0). Without ranks.py nothing happens (one rank)."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("engine.trainers.litgpt.ranks") is None:
        return
    importlib.import_module("engine.trainers.litgpt.ranks").prepare()


def main(argv: list[str]) -> int:
    notice_save.install_handlers()
    if not argv or argv[0] != "pretrain":
        print("usage: python -m engine.trainers.litgpt.entry pretrain --config FILE [litgpt options]", file=sys.stderr)
        return 2
    pretrain = lean_imports.import_pretrain()   # without the transformers torchmetrics would import for nothing

    prepare_ranks()
    notice_save.attach(pretrain)
    data_skip.attach(pretrain)   # RUNBOOK_DATA_SKIP: the resumed loader moved past a skipped window
    hyperparameters.parse_once(pretrain)
    run_litgpt_cli(pretrain)   # reads sys.argv[1:]: `pretrain --config FILE ...`
    return 0


def run_litgpt_cli(pretrain: ModuleType) -> None:
    """litgpt.__main__.main with its settings, over its `pretrain` command alone: jsonargparse then builds
    one command's parser, not litgpt's 22 (0.2 s of a start; measured in docs/benchmarks.md)."""
    import warnings

    import torch
    from jsonargparse import CLI, set_config_read_mode, set_docstring_parse_options

    set_docstring_parse_options(attribute_docstrings=True)
    set_config_read_mode(urls_enabled=True)
    warnings.filterwarnings(action="ignore", message=r"The epoch parameter in `scheduler.step\(\)` was not necessary and is being deprecated.*",
                            category=UserWarning, module=r".*torch\.optim\.lr_scheduler.*")
    torch.set_float32_matmul_precision("high")
    CLI({"pretrain": pretrain.setup})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
