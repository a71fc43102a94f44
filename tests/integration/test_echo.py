"""``voiceagent talk`` on speakers (issue #70, item 2): the agent's voice comes back into the
microphone through a room (``echo_path.Room``: 60 ms, a synthetic room response, 6 dB under what
was played), and the talk's echo cancellation keeps the agent from hearing itself.

The user waits for every answer to end (``echo_path.TurnTakingMicrophone``), so an interruption or
a user turn beyond the questions asked is the agent hearing itself.  The same room without the
cancellation is the control: it must show the failure, or the room is too quiet to test anything.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.echo_path import Room, talk_in_room
from tests.profile import profile_config

pytestmark = pytest.mark.models

QUESTIONS = ("capital", "weather", "colour", "count", "short")


def _config() -> Any:
    return profile_config({"llm.max_tokens": "40"})  # five short answers: the talk plays them in real time


# Alone (serial): the room and the talk run in real time in one process, and on a machine whose
# cores are taken (a fresh clone's three workers and two more test processes beside them) the
# speaker fell behind the microphone, so the simulated echo's delay moved under the canceller,
# and the user's own question came in two turns (5 s to first audio): it failed once so.
@pytest.mark.serial
def test_a_five_turn_talk_on_speakers_never_hears_itself_with_echo_cancellation(
    engines: Any, speech: dict[str, Path], run: Callable[..., Any], tmp_path: Path
) -> None:
    questions = [speech[name] for name in QUESTIONS]
    talk = run(talk_in_room(engines, _config(), questions, room=Room(gain_db=-6.0), cancel=True, out=tmp_path / "out.wav"), 240)
    users = [t for t in talk.result.turns if t.role == "user"]
    replies = [t for t in talk.result.turns if t.role == "assistant"]
    assert talk.mic.asked == 5, talk.printed
    assert talk.self_interruptions == 0 and talk.result.truncations == [], talk.printed
    assert len(users) == 5 and len(replies) == 5 and all(r.status == "completed" and r.text for r in replies), talk.printed
    assert talk.result.errors == [], talk.result.errors


def test_the_same_room_without_echo_cancellation_makes_the_agent_interrupt_itself(
    engines: Any, speech: dict[str, Path], run: Callable[..., Any], tmp_path: Path
) -> None:
    room = Room(gain_db=-6.0)
    talk = run(
        talk_in_room(engines, _config(), [speech["capital"]], room=room, cancel=False, out=tmp_path / "out.wav", stop_at_first=True), 120
    )
    assert talk.self_interruptions >= 1, talk.printed
