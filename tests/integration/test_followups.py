"""A follow-up question is answered about what the turn before it was about (issue #12): "What is
the capital of Italy?" then "And how many people live there?" must be about Rome, not Italy.

Real models through the in-process talk driver, spoken by the Piper voice; the accepted and
rejected answers are the spoken eval's own (``benchmarks/eval_questions.toml``), so the test and the
eval judge alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.common.questions import load_questions
from benchmarks.common.scoring import answer_correct, echoes
from tests.conftest import ROOT, make_fixtures
from tests.integration.local_talk import talk_file
from tests.profile import profile_config

pytestmark = [pytest.mark.models, pytest.mark.unpaced]


@pytest.mark.xfail(
    profile_config().llm.model == "qwen2.5-0.5b",
    reason="a limit of the fast profile's 0.5B (issue #12): it answers the follow-up about Italy ('Italy has a population of "
    "approximately 5 million people.'); the 1.5B (profiles balanced and quality) answers about Rome",
    strict=False,
)
def test_the_follow_up_about_the_capital_is_answered_about_rome(engines: Any, run: Any, tmp_path: Path) -> None:
    questions = {q.id: q for q in load_questions(ROOT / "benchmarks" / "eval_questions.toml")}
    lead, follow = questions["capital_italy"], questions["rome_population"]
    assert follow.follows == lead.id
    # Spoken by Piper, which the shared `speech` fixture (espeak-ng only) does not make
    wav = make_fixtures.make(make_fixtures.FIXTURES["piper_rome"], ROOT / ".cache" / "fixtures")
    result, printed, _ = talk_file(engines, run, wav, tmp_path / "out.wav")
    users = [t.text for t in result.turns if t.role == "user"]
    answers = [t.text for t in result.turns if t.role == "assistant" and t.text]
    assert len(users) == 2 and len(answers) == 2, printed
    assert answer_correct(answers[0], lead.accept, lead.reject), printed
    # Rome, or a figure the size of Rome's; never Italy's 59-60 million
    assert answer_correct(answers[1], follow.accept, follow.reject), printed
    assert not echoes(users[1], answers[1]), printed
