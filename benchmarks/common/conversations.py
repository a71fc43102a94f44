"""The spoken evals' conversations (eval_quality.py, eval_stt.py, eval_answers.py): questions
packed a few to a conversation, a follow-up always right after its lead question and in its
voice, the voices taking turns."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common.questions import Question
from benchmarks.common.speech import Voice

__all__ = ["TURNS_PER_CONVERSATION", "Conversation", "plan", "units"]

TURNS_PER_CONVERSATION = 4
"""The most questions :func:`plan` packs into one conversation."""


@dataclass
class Conversation:
    """Questions asked in order in one session, in one voice.  ``path`` and ``starts_s`` are set
    once its audio is written (eval_quality.py's ``conversation_wav``)."""

    id: str
    voice: Voice
    questions: list[Question]
    path: Path | None = None
    starts_s: list[float] = field(default_factory=list)
    """When each question's speech begins in the file (ground truth, from its energy)."""


def units(questions: list[Question]) -> list[list[Question]]:
    """Questions that must stay together and in order: a lead question and its follow-ups."""
    out: list[list[Question]] = []
    for q in questions:
        if q.follows is not None and out and out[-1][-1].id == q.follows:
            out[-1].append(q)
        else:
            out.append([q])
    return out


def plan(
    questions: list[Question], voices: list[Voice], seed: int, *, per_conversation: int = TURNS_PER_CONVERSATION, every_voice: bool = False
) -> list[Conversation]:
    """Pack the questions (shuffled by ``seed``, a follow-up kept right after its lead) into
    conversations of at most ``per_conversation`` turns; the voices take turns, one per
    conversation (``every_voice``: every conversation is spoken in every voice)."""
    rng = random.Random(seed)
    groups = units(questions)
    rng.shuffle(groups)
    packed: list[list[Question]] = []
    for g in groups:
        if packed and len(packed[-1]) + len(g) <= per_conversation:
            packed[-1].extend(g)
        else:
            packed.append(list(g))
    offset = rng.randrange(len(voices))
    convs: list[Conversation] = []
    for i, qs in enumerate(packed):
        chosen = voices if every_voice else [voices[(i + offset) % len(voices)]]
        for v in chosen:
            convs.append(Conversation(f"c{i:02d}-{re.sub(r'[^a-z0-9]+', '-', v.label.lower())}", v, qs))
    return convs
