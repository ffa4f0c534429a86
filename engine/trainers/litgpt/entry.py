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
2. import litgpt.pretrain (torch, lightning: most of a start's seconds).
3. prepare_ranks(): the multi-rank hook (engine/trainers/litgpt/ranks.py, issue 15): it may replace
   litgpt's strategy choice or write per-rank heartbeats before litgpt constructs its Fabric.
4. notice_save.attach(pretrain): the save-on-notice guard at litgpt's optimizer-step boundary.
5. litgpt's CLI (litgpt.__main__.main) with the argv above.
"""

from __future__ import annotations

import sys


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
    from engine.trainers.litgpt import notice_save

    notice_save.install_handlers()
    if not argv or argv[0] != "pretrain":
        print("usage: python -m engine.trainers.litgpt.entry pretrain --config FILE [litgpt options]", file=sys.stderr)
        return 2
    import litgpt.pretrain as pretrain
    from litgpt.__main__ import main as litgpt_main

    prepare_ranks()
    notice_save.attach(pretrain)
    litgpt_main()   # reads sys.argv[1:]: `pretrain --config FILE ...`
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
