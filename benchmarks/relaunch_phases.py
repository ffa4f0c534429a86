"""One litgpt relaunch, timed phase by phase (run by benchmarks/bench_relaunch.py in a fresh interpreter).

    python -m benchmarks.relaunch_phases cold|warm LITGPT_CONFIG

Runs what engine/trainers/litgpt/entry.py runs (litgpt's pretrain CLI, resume from the config's
checkpoint) and prints one JSON line per phase boundary: seconds since the relaunch began. `cold`: the
clock starts at the interpreter's own start (psutil create_time), so it includes the interpreter and the
imports; `warm`: the imports are done first (as a warm spare has them) and the clock starts after them.
It stops once the first new optimizer step is done (all its micro-batches) without training further.
"""

from __future__ import annotations

import json
import os
import sys
import time

import psutil


def main(mode: str, config: str) -> None:
    start = psutil.Process().create_time()

    def mark(phase: str) -> None:
        print(json.dumps({"phase": phase, "s": round(time.time() - start, 4)}), flush=True)

    mark("interpreter up")
    import torch  # noqa: F401

    mark("import torch")
    import lightning  # noqa: F401

    mark("import lightning")
    import litgpt.pretrain as pretrain
    import litdata  # noqa: F401

    mark("import litgpt, litdata")
    if mode == "warm":
        start = time.time()
        mark("warm: relaunch begins")
    for name in ("get_dataloaders", "validate", "measure_flops"):
        wrap(pretrain, name, mark)
    import lightning.fabric

    original_load = lightning.fabric.Fabric.load

    def load(self, *args, **kwargs):
        mark("before checkpoint load")
        result = original_load(self, *args, **kwargs)
        mark("checkpoint loaded")
        return result

    lightning.fabric.Fabric.load = load
    original_main = pretrain.main

    def main_(*args, **kwargs):
        mark("litgpt CLI parsed, Fabric, logger, tokenizer ready")
        return original_main(*args, **kwargs)

    pretrain.main = main_
    base = pretrain.CycleIterator

    class Timed(base):
        batches = 0

        def __next__(self):
            Timed.batches += 1
            if Timed.batches == 1:
                mark("first batch asked (loop starts)")
            elif Timed.batches == Timed.stop_at:
                mark("first optimizer step done")
                sys.stdout.flush()
                os._exit(0)
            return super().__next__()

    pretrain.CycleIterator = Timed
    Timed.stop_at = accumulation(config) + 1
    from engine.trainers.litgpt.entry import run_litgpt_cli

    sys.argv = ["litgpt", "pretrain", "--config", config]
    run_litgpt_cli(pretrain)


def accumulation(config: str) -> int:
    from ruamel.yaml import YAML

    train = YAML(typ="safe", pure=True).load(open(config))["train"]
    return max(1, int(train["global_batch_size"]) // int(train["micro_batch_size"]))


def wrap(module, name: str, mark) -> None:
    original = getattr(module, name)

    def timed(*args, **kwargs):
        mark(f"before {name}")
        result = original(*args, **kwargs)
        mark(f"after {name}")
        return result

    setattr(module, name, timed)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
