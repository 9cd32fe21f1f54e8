"""The open-world judge (the rubric's open mode, judges/rubric.py): natural English, any
author. judge.py decides; text, styles, structure and classifier read the style; topics,
topic_model, topic_fields and vectors the topic; flow, grammar and guard the fluency and the
injections."""

from judges.open_world.judge import OpenWorldJudge

__all__ = ["OpenWorldJudge"]
