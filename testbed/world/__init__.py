"""The simulated writing world: styles, topics, a text generator, corruptions and prompts.

Public API (other packages code against exactly these names):
    STYLES, TOPICS, EMOTICONS, generate, corrupt, CORRUPTIONS, PromptSpec, prompts,
    render_prompt, topic_of_prompt, split_words, join_words, vocabulary
"""

from testbed.world.corrupt import CORRUPTIONS, corrupt
from testbed.world.generator import generate
from testbed.world.language import join_words, split_words
from testbed.world.prompts import PromptSpec, prompts, render_prompt, topic_of_prompt
from testbed.world.styles import EMOTICONS, STYLES
from testbed.world.topics import TOPICS
from testbed.world.vocabulary import vocabulary

__all__ = [
    "CORRUPTIONS",
    "EMOTICONS",
    "STYLES",
    "TOPICS",
    "PromptSpec",
    "corrupt",
    "generate",
    "join_words",
    "prompts",
    "render_prompt",
    "split_words",
    "topic_of_prompt",
    "vocabulary",
]
