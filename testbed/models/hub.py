"""`policy.checkpoint`: a local causal-LM directory as the starting policy.

Two formats load:
  - a Hub-format directory (config.json, weights, a tokenizer that `AutoTokenizer` loads, i.e. a
    tokenizer_config.json beside it): `AutoModelForCausalLM` and `HubTokenizer`, local files only;
    prompts go through its chat template, responses end at its stop tokens;
  - the project's own SFT directory (config.json, weights and the word-level tokenizer.json, no
    tokenizer_config.json), as before.
`python -m testbed.cli.export` writes the project's policy in the first format.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.models.modules import HFModule
from testbed.paths import WEIGHTS, check_directory

if TYPE_CHECKING:  # torch loads on use
    pass


def fingerprint(directory: Path) -> str:
    """What the warm-up cache keys a checkpoint by: its small files' contents and its weight
    files' names, sizes and times (hashing gigabytes of weights would stall every start)."""
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if path.suffix == ".json" or path.name.endswith(".jinja"):
            digest.update(path.name.encode() + path.read_bytes())
        elif any(path.match(w) for w in WEIGHTS):
            stat = path.stat()
            digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def is_project_format(directory: Path) -> bool:
    return (directory / "tokenizer.json").exists() and not (directory / "tokenizer_config.json").exists()


def _load_model(directory: Path) -> HFModule:
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)
    except ValueError as exc:  # e.g. a config of a family with no causal-LM head
        raise ValueError(
            f"policy.checkpoint: {directory}: not a causal LM that AutoModelForCausalLM loads ({exc})"
        ) from None
    model.eval()
    return model


# Config fields of families whose causal-LM head changes the logits after the output layer. The
# trainers score tokens with `get_output_embeddings()` on the backbone's states (the engine with the
# full forward), so for these the behaviour log-probs would not be the trainers' log-probs.
LOGIT_TRANSFORMS = {
    "final_logit_softcapping": None,
    "logits_scaling": 1.0,
    "logit_scale": 1.0,
    "output_multiplier_scale": None,
}


def check_scoring(model: HFModule, directory: Path) -> None:
    for name, neutral in LOGIT_TRANSFORMS.items():
        value = getattr(model.config, name, neutral)
        if value not in (neutral, None):
            raise ValueError(
                f"policy.checkpoint: {directory}: {model.config.model_type} transforms its logits "
                f"({name}={value}) after the output layer, which the trainers' token scoring does not "
                "repeat; the behaviour log-probs would not match"
            )


def load_project_checkpoint(directory: Path) -> tuple[HFModule, Any, dict]:
    """The project's own directory: the model and the word-level tokenizer.json."""
    from testbed.models.tokenizer import WordTokenizer  # loads the tokenizers library only for this format

    tok = WordTokenizer.load(directory / "tokenizer.json")
    return _load_model(directory), tok, {"checkpoint": str(directory)}


def load_checkpoint(path: str | Path) -> tuple[HFModule, Any, dict]:
    """(model, tokenizer, report) for `policy.checkpoint`; errors name the directory."""
    directory = check_directory(path)
    if is_project_format(directory):
        return load_project_checkpoint(directory)
    if not (directory / "tokenizer_config.json").exists():
        raise FileNotFoundError(
            f"policy.checkpoint: {directory} has no tokenizer (tokenizer_config.json with "
            "tokenizer.json, or the project's own tokenizer.json)"
        )
    from testbed.models.hub_tokenizer import HubTokenizer

    tokenizer = HubTokenizer.load(directory)
    model = _load_model(directory)
    check_scoring(model, directory)
    rows = model.get_input_embeddings().weight.shape[0]
    if tokenizer.vocab_size > rows:
        raise ValueError(
            f"policy.checkpoint: {directory}: the tokenizer has {tokenizer.vocab_size} tokens but the "
            f"model's embedding only {rows} rows"
        )
    report = {
        "checkpoint": str(directory),
        "key": f"{directory.resolve()}:{fingerprint(directory)}",
        "family": model.config.model_type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "chat_template": tokenizer.has_chat_template,
        "stop_ids": list(tokenizer.stop_ids),
    }
    export = directory / "export.json"  # written by testbed.models.export: where the weights came from
    if export.exists():
        report["export"] = json.loads(export.read_text())
    return model, tokenizer, report
