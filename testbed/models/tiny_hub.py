"""A second tiny MoE checkpoint of another family, in the Hub format: a Qwen2-MoE (shared expert,
attention biases, no q/k norms) with a byte-level BPE tokenizer trained with `tokenizers` on the
world's corpus and a ChatML chat template, briefly fine-tuned on the SFT corpus. It shows that
nothing past `policy.checkpoint` assumes the project's Qwen3-MoE or its word-level tokenizer.

    python -m testbed.models.tiny_hub DIR [--steps 40] [--vocab-size 1024]

`tiny_hub_checkpoint(cache)` builds it once under a cache directory (keyed by its settings) and
returns the directory; the tests use that.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2MoeConfig, Qwen2MoeForCausalLM

from testbed.models.hub_tokenizer import HubTokenizer, chat_messages
from testbed.models.sft import encode_corpus, sft_corpus, train_sft
from testbed.world import STYLES

FORMAT = 1  # bump when what the builder writes changes meaning
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# ChatML, as Qwen's models use it (without their default system prompt).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
DEFAULTS = {"vocab_size": 1024, "corpus_size": 1500, "steps": 40, "batch_size": 16, "lr": 1e-2, "seed": 0}


def world_texts(size: int, seed: int) -> list[str]:
    """What the tokenizer learns from: generated pieces in every style and the rendered prompts."""

    texts = []
    for prompt, piece, _ in sft_corpus(size, list(STYLES), seed):
        texts += [piece, *(m["content"] for m in chat_messages(prompt))]
    return texts


def train_bpe(texts: list[str], vocab_size: int) -> Any:
    """A byte-level BPE `PreTrainedTokenizerFast` with the ChatML template; eos is <|im_end|>."""

    inner = Tokenizer(models.BPE())
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    inner.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    inner.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=inner,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=None,
    )


def build_model(tokenizer: Any, seed: int) -> Any:
    torch.manual_seed(seed)
    config = Qwen2MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return Qwen2MoeForCausalLM(config)


def build(directory: str | Path, **settings: Any) -> Path:
    """Train the tokenizer, build and fine-tune the model, write the Hub-format directory atomically."""

    s = {**DEFAULTS, **settings}
    tokenizer = train_bpe(world_texts(s["corpus_size"], s["seed"]), s["vocab_size"])
    generation = GenerationConfig(
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")],
        pad_token_id=tokenizer.pad_token_id,
    )
    model = build_model(tokenizer, s["seed"])
    adapter = HubTokenizer(tokenizer, generation, where="tiny_hub")
    # The project's own SFT on the same corpus, through the adapter: the chat template's prompts.
    data = encode_corpus(sft_corpus(s["corpus_size"], list(STYLES), s["seed"] + 1), adapter)
    losses = (
        train_sft(model, data, s["steps"], s["batch_size"], s["lr"], s["seed"], "tiny Qwen2-MoE SFT")
        if s["steps"]
        else []
    )
    directory = Path(directory)
    tmp = directory.with_name(directory.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    generation.save_pretrained(tmp)
    final = sum(losses[-20:]) / max(1, len(losses[-20:]))
    (tmp / "build.json").write_text(json.dumps({"format": FORMAT, **s, "final_loss": final}, indent=2))
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return directory


def tiny_hub_checkpoint(cache: str | Path, **settings: Any) -> Path:
    """The checkpoint under `cache`, built on first use (another process's finished build is kept)."""
    s = {"format": FORMAT, **DEFAULTS, **settings}
    key = hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()[:12]
    directory = Path(cache) / f"tiny-qwen2-moe-{key}"
    if not (directory / "build.json").exists():
        mine = build(directory.with_name(f"{directory.name}.build{os.getpid()}"), **settings)
        try:
            os.replace(mine, directory)
        except OSError:  # another process finished first (a non-empty directory is not replaced): keep theirs
            shutil.rmtree(mine)
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.models.tiny_hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    for name, value in DEFAULTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = vars(parser.parse_args(argv))
    print(build(args.pop("directory"), **args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
