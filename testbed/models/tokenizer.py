"""A word-level tokenizer over the world's vocabulary, built with `tokenizers`.

The world's language is small and closed, so one token per word keeps sequences short (a piece is
~30 tokens) and makes every sampled token a real word. The pre-tokenizer reproduces
`testbed.world.split_words` (emoticons whole, punctuation isolated) so a saved tokenizer.json is
usable on its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, models, pre_tokenizers

from testbed.world import EMOTICONS, join_words, split_words, vocabulary

SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>", "<sep>")


class WordTokenizer:
    """encode(text) -> ids and decode(ids) -> text, with pad/bos/eos/sep ids for the policy."""

    def __init__(self, tokenizer: Tokenizer):
        self.hf = tokenizer
        ids = {s: i for s in SPECIALS if (i := tokenizer.token_to_id(s)) is not None}
        missing = [s for s in SPECIALS if s not in ids]
        if missing:
            raise ValueError(f"tokenizer lacks special tokens {missing}")
        self.pad_id, self.unk_id, self.bos_id, self.eos_id, self.sep_id = (ids[s] for s in SPECIALS)
        self._special_ids = set(ids.values())

    @classmethod
    def build(cls, extra_words: Iterable[str] = ()) -> WordTokenizer:
        """Over the world's vocabulary, and `extra_words` after it (an environment's own text,
        such as the editor's notes; the world's ids stay where they are)."""
        words = [w for w in vocabulary() if w not in SPECIALS and w not in EMOTICONS]
        known = set(words) | set(SPECIALS) | set(EMOTICONS)
        words += sorted(w for w in set(extra_words) if w not in known)
        vocab = {tok: i for i, tok in enumerate([*SPECIALS, *words])}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(r"[.,!?;:]"), behavior="isolated")]
        )
        # Added tokens are matched before pre-tokenisation, so "(^_^)" stays one token.
        tok.add_tokens(list(EMOTICONS))
        tok.add_special_tokens(list(SPECIALS))
        return cls(tok)

    @classmethod
    def load(cls, path: str | Path) -> WordTokenizer:
        return cls(Tokenizer.from_file(str(path)))

    def save(self, path: str | Path) -> None:
        self.hf.save(str(path))

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(split_words(text), is_pretokenized=True, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        words = [self.hf.id_to_token(i) for i in ids if i not in self._special_ids]
        return join_words([w for w in words if w is not None])

    def prompt_ids(self, prompt: str) -> list[int]:
        """The policy's input for a prompt: <bos> prompt <sep>; the response follows, ending in <eos>."""
        return [self.bos_id, *self.encode(prompt), self.sep_id]

    def observation_ids(self, text: str) -> list[int]:
        """What the environment says between two drafts: text <sep>; the next draft follows."""
        return [*self.encode(text), self.sep_id]
