"""The spoken evals' questions (eval_quality.py, eval_stt.py, eval_answers.py,
eval_end_of_turn.py): the question files, read and checked.

A question (``benchmarks/eval_questions.toml``, or ``benchmarks/eval_tool_questions.toml`` for
requests that call a tool) has an id, its text (``|`` where it is spoken with a pause), its
accepted and rejected answer words, a category, and whether it is held out from tuning, follows
the question before it, or is a known failure.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CATEGORIES", "QUESTIONS_FILE", "TOOLS_CATEGORY", "Question", "load_questions"]

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS_FILE = ROOT / "benchmarks" / "eval_questions.toml"
CATEGORIES = ("facts", "arithmetic", "reminders", "small_talk", "followup")
TOOLS_CATEGORY = "tools"
"""Of benchmarks/eval_tool_questions.toml (``eval_stt.py --questions``): requests that call a tool."""


@dataclass(frozen=True)
class Question:
    """One question of a question file (see the module docstring); :func:`load_questions` checks it."""

    id: str
    text: str
    accept: tuple[str, ...]
    category: str
    reject: tuple[str, ...] = ()
    held_out: bool = False
    follows: str | None = None
    pause_ms: int = 0
    sentences: int = 2
    known_failure: bool = False
    echo_ok: bool = False
    """A greeting or farewell whose natural reply is the same words ("Goodbye, have a nice day."
    answered "Goodbye! Have a nice day!"): the echo rule of ``judge`` does not apply to it."""

    @property
    def parts(self) -> tuple[str, ...]:
        """The halves spoken with ``pause_ms`` of silence between them (one part: no pause)."""
        return tuple(p.strip() for p in self.text.split("|"))

    @property
    def spoken(self) -> str:
        """The text as said: its parts joined, without the ``|``."""
        return " ".join(self.parts)


def load_questions(path: Path = QUESTIONS_FILE) -> list[Question]:
    """The questions of ``path``, checked: unique ids, known categories, a pause where ``|`` is,
    and each follow-up right after the question it follows."""
    rows = tomllib.loads(path.read_text(encoding="utf-8")).get("question", [])
    known = set(Question.__dataclass_fields__)
    out: list[Question] = []
    for row in rows:
        extra = set(row) - known
        if extra:
            raise ValueError(f"{row.get('id')}: unknown field(s) {sorted(extra)}")
        q = Question(**{**row, "accept": tuple(row.get("accept", ())), "reject": tuple(row.get("reject", ()))})
        _check_question(q, out)
        out.append(q)
    return out


def _check_question(q: Question, before: list[Question]) -> None:
    problems = []
    if any(p.id == q.id for p in before):
        problems.append("duplicate id")
    if q.category not in (*CATEGORIES, TOOLS_CATEGORY):
        problems.append(f"category must be one of {(*CATEGORIES, TOOLS_CATEGORY)}")
    if not q.accept:
        problems.append("no accepted answers")
    if len(q.parts) > 2 or not all(q.parts):
        problems.append("at most one ' | ' pause, between two non-empty halves")
    if (len(q.parts) == 2) != (q.pause_ms > 0) or not (q.pause_ms == 0 or 300 <= q.pause_ms <= 1200):
        problems.append("pause_ms (300-1200) goes with a ' | ' in the text, and only then")
    if q.follows is not None and (not before or before[-1].id != q.follows):
        problems.append(f"follows {q.follows!r}, which must be the question just before it")
    if problems:
        raise ValueError(f"question {q.id}: {'; '.join(problems)}")
