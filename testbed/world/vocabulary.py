"""The world's vocabulary: every token the generator, the corruptions and the prompts can emit.

It lives apart from `language` because it needs the prompts' tokens, and `prompts` itself
tokenises with `language.split_words`: keeping it here keeps the import graph one-way
(language <- prompts <- vocabulary).
"""

from __future__ import annotations

import functools

from testbed.world.language import PUNCT, style_tokens
from testbed.world.prompts import prompt_tokens
from testbed.world.styles import EMOTICONS, STYLES


@functools.cache
def _vocabulary() -> tuple[str, ...]:
    toks: set[str] = set(PUNCT) | set(EMOTICONS) | set(STYLES)
    for style in STYLES:
        toks |= style_tokens(style)
    toks |= prompt_tokens()
    return tuple(sorted(toks))


def vocabulary() -> list[str]:
    """Sorted list of every token generate(), corrupt() and render_prompt() can emit."""
    return list(_vocabulary())
