"""The project's SFT policy in exactly the Hub format, so that `policy.checkpoint` runs it through
the path any Hub model takes (AutoModelForCausalLM, AutoTokenizer, the chat template):

    python -m testbed.cli.export DIR [--scenario scenarios/style_shift.yaml] [--seed 0] [--set key=value ...]

DIR gets config.json, model.safetensors, generation_config.json, the word-level tokenizer as a
`PreTrainedTokenizerFast` (tokenizer.json, tokenizer_config.json with the chat template) and
export.json (where it came from). The SFT policy is the scenario's (from the cache, or trained).

The chat template writes exactly the ids the project's policy was trained on and sees today,
`<bos> request styles: a, b, c. <sep> response <eos>`, with the system message (the candidate
styles, testbed.models.hub_tokenizer.chat_messages) after the user's request; so a run on the
exported directory writes the same rows as a run on the built policy.
"""

from __future__ import annotations

import json
import os
import shutil
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
    inner.decoder = decoders.Sequence(
        [
            decoders.Replace(Regex("^"), " "),  # a space before every token, then fused, then trimmed
            decoders.Fuse(),
            *[decoders.Replace(" " + p, p) for p in sorted(PUNCT)],
            decoders.Strip(" ", 1, 0),
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=inner,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=["<sep>"],
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
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
