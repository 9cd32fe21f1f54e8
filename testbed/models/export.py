"""The project's SFT policy in exactly the Hub format, so that `policy.checkpoint` runs it through
the path any Hub model takes (AutoModelForCausalLM, AutoTokenizer, the chat template):

    python -m testbed.models.export DIR [--scenario scenarios/style_shift.yaml] [--seed 0] [--set key=value ...]

DIR gets config.json, model.safetensors, generation_config.json, the word-level tokenizer as a
`PreTrainedTokenizerFast` (tokenizer.json, tokenizer_config.json with the chat template) and
export.json (where it came from). The SFT policy is the scenario's (from the cache, or trained).

The chat template writes exactly the ids the project's policy was trained on and sees today,
`<bos> request styles: a, b, c. <sep> response <eos>`, with the system message (the candidate
styles, testbed.models.hub_tokenizer.chat_messages) after the user's request; so a run on the
exported directory writes the same rows as a run on the built policy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from tokenizers import Regex, Tokenizer, decoders

from testbed.world.language import PUNCT

# user: content [+ " " + the system message] + <sep>; assistant: content + <eos>. The generation
# prompt is the <sep> every user turn ends with (the project's layout has no other).
CHAT_TEMPLATE = (
    "{{- bos_token -}}{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{%- set ns.system = message['content'] -%}"
    "{%- elif message['role'] == 'user' -%}{{- message['content'] -}}"
    "{%- if ns.system -%}{{- ' ' + ns.system -}}{%- set ns.system = '' -%}{%- endif -%}<sep>"
    "{%- elif message['role'] == 'assistant' -%}{{- message['content'] -}}{{- eos_token -}}"
    "{%- endif -%}{%- endfor -%}"
)


def hub_tokenizer(tok: Any) -> Any:
    """The project's `WordTokenizer` as a `PreTrainedTokenizerFast` with the chat template. Its
    decoder writes `join_words`' text (spaces between tokens, none before punctuation)."""
    from transformers import PreTrainedTokenizerFast

    inner = Tokenizer.from_str(tok.hf.to_str())
    inner.decoder = decoders.Sequence([
        decoders.Replace(Regex("^"), " "),  # a space before every token, then fused, then trimmed
        decoders.Fuse(),
        *[decoders.Replace(" " + p, p) for p in sorted(PUNCT)],
        decoders.Strip(" ", 1, 0),
    ])
    return PreTrainedTokenizerFast(
        tokenizer_object=inner, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        additional_special_tokens=["<sep>"], chat_template=CHAT_TEMPLATE, clean_up_tokenization_spaces=False,
        model_max_length=None,
    )


def export_policy(model: Any, tok: Any, directory: str | Path, provenance: dict | None = None) -> Path:
    """Write `model` and `tok` (a WordTokenizer) as a Hub-format directory, atomically."""
    from transformers import GenerationConfig

    directory = Path(directory)
    tmp = directory.with_name(directory.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    hub_tokenizer(tok).save_pretrained(tmp)
    GenerationConfig(bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id).save_pretrained(tmp)
    (tmp / "export.json").write_text(json.dumps(provenance or {}, indent=2, default=str))
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return directory


def scenario_policy(scenario: Any, seed: int, log: Any = print) -> tuple[Any, Any, dict]:
    """The SFT policy a run of `scenario` starts seed `seed` from (cached, or trained now)."""
    from testbed.models.sft import load_or_train_policy
    from testbed.starting import sft_evaluator

    cfg = scenario.policy
    if cfg.sft.per_seed:
        cfg = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"seed": cfg.sft.seed + seed})})
    return load_or_train_policy(cfg, scenario.world.archetypes, evaluate=sft_evaluator(scenario), log=log, env=scenario.env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.models.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="where to write the Hub-format checkpoint (replaced if it exists)")
    parser.add_argument("--scenario", default="scenarios/style_shift.yaml", help="whose SFT policy (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="the run seed whose policy (with policy.sft.per_seed)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    from testbed.config import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.scenario, args.overrides)
    except (ScenarioError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if scenario.policy.checkpoint:
        print(f"error: {args.scenario} starts from policy.checkpoint {scenario.policy.checkpoint}, not from an SFT "
              "policy of its own; nothing to export", file=sys.stderr)
        return 2
    log = lambda message: print(message, file=sys.stderr)  # noqa: E731
    model, tok, report = scenario_policy(scenario, args.seed, log)
    out = export_policy(model, tok, args.directory, {"scenario": str(args.scenario), "seed": args.seed, "sft": report})
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
