"""A Hub tokenizer (any `PreTrainedTokenizerFast` that `AutoTokenizer` loads) behind the interface
the env, the engine and the trainers use with the project's own `WordTokenizer`: `encode`,
`decode`, `prompt_ids`, `observation_ids`, `pad_id`, `eos_id`, `stop_ids`, `vocab_size`.

Prompts go through the tokenizer's chat template where it has one. The env renders a prompt as
"<request> styles: a, b, c."; here the request becomes the user message and the candidate list
the system message ("styles: a, b, c."), as the SAO paper's prompts put the styles in the system
message. A tokenizer without a chat template gets `bos + prompt` (no separator).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.world.prompts import STYLES_LABEL

MARK = "\u2063turn\u2063"  # a placeholder assistant turn: what the template writes after it ends a turn


def chat_messages(prompt: str) -> list[dict[str, str]]:
    """The env's rendered prompt as chat messages: the candidate styles in the system message."""
    request, label, styles = prompt.partition(f" {STYLES_LABEL} ")
    if not label:
        return [{"role": "user", "content": prompt}]
    return [{"role": "system", "content": f"{STYLES_LABEL} {styles}"}, {"role": "user", "content": request}]


def stop_ids_of(tokenizer: Any, generation_config: Any, where: str) -> tuple[int, ...]:
    """The ids that end a response: the tokenizer's eos and the generation config's eos ids."""
    ids: list[int] = []
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(generation_config, "eos_token_id", None)):
        for i in value if isinstance(value, (list, tuple)) else [value]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise ValueError(
            f"{where}: the tokenizer has no eos token and generation_config.json no eos_token_id, so a "
            "response could never end; set eos_token in tokenizer_config.json"
        )
    return tuple(ids)


class HubTokenizer:
    """The adapter (see the module docstring). `where` names the checkpoint in error messages."""

    def __init__(self, tokenizer: Any, generation_config: Any = None, where: str = "tokenizer"):
        self.hf = tokenizer
        self.where = where
        self.stop_ids = stop_ids_of(tokenizer, generation_config, where)
        self.eos_id = self.stop_ids[0]
        self.bos_id = tokenizer.bos_token_id
        # No pad token (common in Hub checkpoints): pad with eos; padding is always masked out.
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self._prompts: dict[str, list[int]] = {}

    @classmethod
    def load(cls, directory: str | Path) -> HubTokenizer:
        from transformers import AutoTokenizer, GenerationConfig

        directory = Path(directory)
        try:
            tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        except Exception as exc:  # OSError, ValueError, KeyError...: say which directory
            raise ValueError(
                f"policy.checkpoint: {directory}: AutoTokenizer cannot load a tokenizer from it ({exc})"
            ) from None
        generation = (
            GenerationConfig.from_pretrained(directory) if (directory / "generation_config.json").exists() else None
        )
        return cls(tokenizer, generation, where=f"policy.checkpoint {directory}")

    def save(self, directory: str | Path) -> None:
        self.hf.save_pretrained(directory)

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def _render(self, messages: list[dict[str, str]], generation: bool) -> str:
        return self.hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)

    def _ids(self, text: str) -> list[int]:
        """A rendered template's ids: its special tokens are in the text, none are added."""
        return list(self.hf(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, prompt: str) -> list[int]:
        """The policy's input for a prompt: the chat template with a generation prompt (cached:
        the env renders few distinct prompts)."""
        ids = self._prompts.get(prompt)
        if ids is None:
            if self.has_chat_template:
                ids = self._ids(self._render(chat_messages(prompt), generation=True))
            else:
                ids = ([self.bos_id] if self.bos_id is not None else []) + self.encode(prompt)
            self._prompts[prompt] = ids
        return list(ids)

    def observation_ids(self, text: str) -> list[int]:
        """What the environment says between two drafts: a user turn and the next generation
        prompt, as the template writes them after an assistant turn, less the stop token that the
        draft already ends with."""
        if not self.has_chat_template:
            return self.encode(text)
        turn = [{"role": "user", "content": "x"}, {"role": "assistant", "content": MARK}]
        rendered = self._render([*turn, {"role": "user", "content": text}], generation=True)
        if MARK not in rendered:
            raise ValueError(f"{self.where}: the chat template drops the assistant's turn; multi-turn episodes need it")
        ids = self._ids(rendered[rendered.index(MARK) + len(MARK) :])
        while ids and ids[0] in self.stop_ids:
            ids = ids[1:]
        return ids
