"""`runbook check` for kind hf-trainer: the user's own script parses the argv runbook would launch it with,
and stops right there (run by path, never imported by the engine).

    python runbook/hf_parse_probe.py SCRIPT ARG...

It runs SCRIPT as `python SCRIPT ARG...` would (its folder first on sys.path, `__main__`) with
HfArgumentParser's parse methods wrapped: the first TrainingArguments they return is printed as JSON (the
values runbook manages) and the script ends before it builds a model or reads data. A script that never
parses TrainingArguments, or whose parser refuses the argv, says so. Standard library and transformers only.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from typing import Callable

FIELDS = ("output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "max_steps",
          "save_steps", "seed", "logging_steps", "save_only_model", "save_total_limit", "use_cpu")


class Parsed(BaseException):
    """Raised out of the script once its TrainingArguments are parsed (not an Exception: no `except` eats it)."""


def main(argv: list[str]) -> int:
    from transformers import HfArgumentParser, TrainingArguments

    script = os.path.abspath(argv[0])

    def wrapped(method: Callable[..., object]) -> Callable[..., object]:
        def parse(self: HfArgumentParser, *args: object, **kwargs: object) -> object:
            result = method(self, *args, **kwargs)
            for obj in result if isinstance(result, tuple) else (result,):
                if isinstance(obj, TrainingArguments):
                    raise Parsed({name: getattr(obj, name, None) for name in FIELDS})
            return result
        return parse

    for name in ("parse_args_into_dataclasses", "parse_dict", "parse_json_file", "parse_yaml_file"):
        setattr(HfArgumentParser, name, wrapped(getattr(HfArgumentParser, name)))
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except Parsed as parsed:
        print(json.dumps({"parsed": parsed.args[0]}, default=str))
        return 0
    except SystemExit as end:   # argparse's refusal (exit 2) after printing its usage and error to stderr
        print(json.dumps({"error": f"the script's parser exited {end.code} on runbook's arguments"}))
        return 0
    print(json.dumps({"error": "the script ended without parsing TrainingArguments with HfArgumentParser"}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
