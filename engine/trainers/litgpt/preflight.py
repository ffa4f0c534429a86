"""litgpt's part of the preflight (its adapter's check_environment): what `litgpt pretrain` would
otherwise crash on minutes after starting, each as one sentence with the config key's file:line.

What the tokenizer must have mirrors litgpt/tokenizer.py (0.5.13): it reads `tokenizer_class` from
tokenizer_config.json whenever that file exists (a KeyError without it), looks up the bos/eos tokens
it names (ValueError when absent from the vocabulary), and TextFiles encodes every file with bos=True
(NotImplementedError when there is no bos id). The config is checked by litgpt's own parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from engine.core.tokenizer_file import TokenizerUnloadable, load_tokenizer_file
from engine.trainers.preflight import data_folder_problem, room_problem
from engine.trainers.preflight import where as where_written
from engine.trainers.litgpt import launch
from engine.trainers.litgpt import user_config
from engine.trainers.litgpt.settings_of import trainer_settings

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig

PARSE_TIMEOUT_S = 180   # importing litgpt takes ~4 s alone, much longer on a machine busy training
TEXT_FILES = "litgpt.data.TextFiles"
# Run in a fresh interpreter: litgpt's CLI parses the config exactly as `litgpt pretrain` would, and
# --print_config makes it stop there; then the model is built on the meta device to count parameters. litgpt is
# imported as the trainer imports it (lean_imports: without the transformers and matplotlib torchmetrics would
# import for nothing; ~1.5 CPU s of each parse).
PROBE = r"""
import engine.trainers.litgpt.lean_imports
import contextlib, io, json, sys
sys.argv = ["litgpt", "pretrain", "--config", sys.argv[1], "--print_config"]
printed = io.StringIO()
from litgpt.__main__ import main
try:
    with contextlib.redirect_stdout(printed):
        main()
except SystemExit as stop:
    if stop.code:
        raise
import torch, yaml
from litgpt import Config
from litgpt.model import GPT
parsed = yaml.safe_load(printed.getvalue())
config = Config(**parsed["model_config"]) if parsed.get("model_config") else Config.from_name(parsed["model_name"])
with torch.device("meta"):
    model = GPT(config)
print(json.dumps({"parameters": sum(p.numel() for p in model.parameters())}))
"""


def _token(value: object) -> object:   # a token's name, or a mapping with its `content` (JSON)
    return value.get("content") if isinstance(value, dict) else value


def tokenizer_problems(folder: Path, needs_bos: bool, vocab_limit: int | None) -> list[str]:
    """What litgpt's Tokenizer would trip over in `folder` (no key prefix; the caller adds it)."""
    if not (folder / "tokenizer.json").is_file():
        if (folder / "tokenizer.model").is_file():
            return []   # SentencePiece: its own file carries bos/eos
        return [f"no tokenizer.json in {folder}" + ("" if folder.is_dir() else " (the folder does not exist)")]
    try:
        tokenizer = load_tokenizer_file(folder / "tokenizer.json")   # shared with scan-data: the same sentence
    except (TokenizerUnloadable, FileNotFoundError) as error:
        return [str(error) if isinstance(error, TokenizerUnloadable) else f"no tokenizer.json in {folder}"]
    config, bos_id = {}, None
    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            return [f"{config_file} is not readable JSON ({error})"]
        if not isinstance(config, dict) or "tokenizer_class" not in config:
            return [f"{config_file} has no tokenizer_class, which litgpt's Tokenizer reads whenever the file exists "
                    '(e.g. "tokenizer_class": "PreTrainedTokenizerFast")']
        for key in ("bos_token", "eos_token"):
            name = _token(config.get(key))
            if name is not None and tokenizer.token_to_id(str(name)) is None:
                return [f"{config_file} names {key} {name!r}, which is not in {folder / 'tokenizer.json'}'s vocabulary"]
        if (bos := _token(config.get("bos_token"))) is not None:
            bos_id = tokenizer.token_to_id(str(bos))
    if bos_id is None and (generation := folder / "generation_config.json").is_file():
        try:
            bos_id = json.loads(generation.read_text(encoding="utf-8")).get("bos_token_id")
        except (OSError, ValueError, AttributeError):
            pass
    problems = []
    if needs_bos and bos_id is None:
        problems.append(f"the tokenizer in {folder} has no bos token, and litgpt's TextFiles starts every file with "
                        'one: add "bos_token" to tokenizer_config.json (a token of tokenizer.json, e.g. "<s>")')
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if vocab_limit is not None and size > vocab_limit:
        problems.append(f"the tokenizer in {folder} has {size} tokens but the model's vocabulary holds {vocab_limit}; "
                        f"set model.vocab_size to at least {size}")
    return problems


def device_problems(devices: object, device: str, gpus: int) -> list[str]:
    """PURE. Why `devices` trainer processes cannot run on `device` with `gpus` GPUs visible."""
    if device == "cuda" and gpus == 0:
        return ["trainer.device is 'cuda' but this machine has no CUDA GPU visible to torch; set trainer.device: auto (or cpu)"]
    if not isinstance(devices, int) or devices <= 1:
        return []
    if device == "cpu":
        return []   # runbook's entry runs the ranks with DDP over gloo there (engine/trainers/litgpt/ranks.py)
    if devices > gpus:
        return [f"trainer.devices is {devices} but torch sees {gpus} GPU(s) on this machine; set trainer.devices: {gpus}"]
    return []


def bytes_per_value(precision: str) -> int:
    """PURE. Bytes of one saved weight or optimizer value under litgpt's `precision`."""
    return 2 if precision in ("bf16-true", "16-true", "bf16", "16") else 8 if precision.startswith("64") else 4


def checkpoint_estimate(parameters: int, precision: str) -> tuple[int, str]:
    """PURE. Bytes of one litgpt checkpoint (weights + AdamW's two moments), and how that was reckoned."""
    width = bytes_per_value(precision)
    return 3 * parameters * width, (f"{parameters:,} parameters x {width} bytes ({precision}) x 3 "
                                    "for the weights and AdamW's two moments")


def parse_with_litgpt(config: dict) -> tuple[str | None, int | None]:
    """(litgpt's refusal as one sentence or None, the model's parameter count or None)."""
    with tempfile.TemporaryDirectory(prefix="runbook-preflight-") as scratch:
        path = Path(scratch) / "litgpt_pretrain.yaml"
        path.write_text(json.dumps(config, default=str), encoding="utf-8")   # JSON is YAML: no dumper quirks
        try:
            done = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True,
                                  timeout=PARSE_TIMEOUT_S, env=_probe_env())
        except subprocess.TimeoutExpired:
            return f"litgpt did not finish parsing the config within {PARSE_TIMEOUT_S} s (is the machine overloaded?)", None
    if done.returncode:
        lines = [l.strip() for l in done.stderr.splitlines() if l.strip()]
        said = next((l for l in reversed(lines) if l.startswith("error:")), lines[-1] if lines else f"exit {done.returncode}")
        said = said.removeprefix('error:').strip()
        if "torchvision::" in said:   # not the config: a torchvision built for another torch (litdata pulls it in)
            return (f"litgpt cannot be imported in this environment: {said}: the installed torchvision does not "
                    "match this torch; litgpt's pretraining does not need it: `pip uninstall torchvision`, or "
                    "install the torchvision built for this torch"), None
        return f"litgpt pretrain refuses the generated config: {said}", None
    try:
        return None, int(json.loads(done.stdout.strip().splitlines()[-1])["parameters"])
    except (ValueError, KeyError, IndexError):
        return None, None


def _probe_env() -> dict:
    import os

    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TORCHDYNAMO_DISABLE": "1"}   # parsing needs no GPU


def problems(loaded: LoadedConfig, parse: bool | None = None) -> list[str]:
    """Every litgpt-specific problem of this run, one sentence each, file:line first. `parse` (default:
    the run config's trainer.preflight_parse) runs litgpt's own parser on the generated config."""
    cfg, where = loaded.config, lambda *loc: where_written(loaded, loc)
    train_dir, val_dir = loaded.data_path("train_dir"), loaded.data_path("val_dir")
    config = launch.trainer_config(loaded, train_dir, val_dir, None)
    extra = cfg.trainer.extra
    found = []

    gpus = _gpu_count() if cfg.trainer.device != "cpu" else 0
    device = cfg.trainer.device if cfg.trainer.device != "auto" else ("cuda" if gpus else "cpu")
    for problem in device_problems(config.get("devices"), device, gpus):
        loc = ("trainer", "extra", "devices") if "devices" in extra else \
              ("trainer", "device") if problem.startswith("trainer.device ") else ("trainer", "devices")
        found.append(f"{where(*loc)}: {problem}")

    data_class = (config.get("data") or {}).get("class_path") if isinstance(config.get("data"), dict) else None
    model = v if isinstance(v := config.get("model_config"), dict) else {}
    vocab = model.get("padded_vocab_size") or model.get("vocab_size")
    for problem in tokenizer_problems(loaded.data_path("tokenizer_dir"), data_class == TEXT_FILES,
                                      vocab if isinstance(vocab, int) else None):
        loc = ("model", "vocab_size") if "model's vocabulary" in problem else ("data", "tokenizer_dir")
        found.append(f"{where(*loc)}: data.tokenizer_dir: {problem}" if loc[0] == "data" else f"{where(*loc)}: {problem}")

    if cfg.data.kind == "data-module":
        if module_problem := data_module_problem(loaded):
            found.append(f"{where('data')}: {module_problem}")
            return found
    elif any(data_folder_problem("", d) for d in (train_dir, val_dir)):
        return found   # litgpt's parser checks the data paths too: the generic check already said why
    if not (cfg.trainer.preflight_parse if parse is None else parse):
        return found
    refusal, parameters = parse_with_litgpt(config)
    if refusal:
        found.append(f"{where('trainer', 'extra') if extra else loaded.path}: {refusal}")
    elif parameters:
        size, how = checkpoint_estimate(parameters, str(config.get("precision", trainer_settings(cfg).precision)))
        if room := room_problem(loaded.out_dir, size, how):
            found.append(f"{where('out_dir')}: {room}")
    return found


def data_module_problem(loaded: LoadedConfig) -> str | None:
    """What is wrong with a data module runbook passes through: LitData's local data_path must hold the
    optimized splits it reads (`<data_path>/<split>/index.json`). Other modules are checked by litgpt's
    parser (their arguments) and by their own code at the first launch."""

    module = user_config.data_module(loaded)
    if module.get("class_path") != "litgpt.data.LitData":
        return None
    args = module.get("init_args") or {}
    data_path = args.get("data_path")
    if not isinstance(data_path, str) or "://" in data_path:
        return None   # a remote dataset: reachable only from the trainer
    folder = loaded.resolve(Path(data_path))
    if not folder.is_dir():
        return f"data.init_args.data_path: folder {folder} does not exist"
    # Without split_names, LitData trains (and validates) on data_path itself.
    indexes = [folder / str(s) / "index.json" for s in args.get("split_names") or ()] or [folder / "index.json"]
    if missing := [i for i in indexes if not i.is_file()]:
        return f"data.init_args.data_path: no {missing[0]} (a folder that litdata's optimize wrote holds one)"
    return None


def _gpu_count() -> int:
    if not launch.cuda_available():
        return 0
    import torch

    return torch.cuda.device_count()
