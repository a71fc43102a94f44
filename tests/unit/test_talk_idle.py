"""When a file-driven talk is over: quiet after the last reply ends it, but speech heard and not
yet transcribed or answered holds it open longer (a loaded machine's transcript may come seconds
after the speech; ending then dropped the last question), and that wait is bounded too."""

from __future__ import annotations

import io

import numpy as np

from voiceagent.talk.console import Console
from voiceagent.talk.conversation import Conversation


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class _Speaker:
    """Plays nothing: never busy."""

    def write(self, item_id: str, pcm: np.ndarray, rate: int) -> None:  # type: ignore[type-arg]
        pass

    def clear(self) -> set[str]:
        return set()

    def played_ms(self, item_id: str) -> float:
        return 0.0

    def busy(self) -> bool:
        return False


def _conversation(clock: _Clock) -> Conversation:
    return Conversation(_Speaker(), Console(io.StringIO(), live=False), tail_s=2.0, pending_tail_s=20.0, clock=clock)  # type: ignore[arg-type]


def test_quiet_after_a_reply_ends_the_talk_after_tail_s() -> None:
    clock = _Clock()
    conv = _conversation(clock)
    conv.user_speaking()
    conv.user_stopped()
    conv.user_final("u1", "What is the capital of France?")
    conv.response_started("r1", "a1")
    conv.response_done("r1", "a1", "completed", "Paris.")
    clock.t += 1.9
    assert not conv.idle()
    clock.t += 0.2
    assert conv.idle()


def test_speech_not_yet_transcribed_holds_the_talk_open_until_its_transcript() -> None:
    clock = _Clock()
    conv = _conversation(clock)
    conv.user_speaking()
    conv.user_stopped()
    clock.t += 5.0  # the transcript is late: a loaded machine
    assert not conv.idle()
    conv.user_final("u1", "How many wheels does a bicycle have?")
    clock.t += 1.0
    assert not conv.idle()  # its answer may start within the ordinary tail
    clock.t += 1.1
    assert conv.idle()


def test_a_response_answers_pending_speech_too() -> None:
    clock = _Clock()
    conv = _conversation(clock)
    conv.user_speaking()
    conv.response_started("r1", "a1")  # a reply begun before its transcript came (speculation)
    conv.response_done("r1", "a1", "completed", "Two.")
    clock.t += 2.1
    assert conv.idle()


def test_speech_that_never_gets_a_transcript_ends_the_talk_after_pending_tail_s() -> None:
    clock = _Clock()
    conv = _conversation(clock)
    conv.user_speaking()  # a cough the server drops as a sound: no transcript, no response
    conv.user_stopped()
    clock.t += 19.9
    assert not conv.idle()
    clock.t += 0.2
    assert conv.idle()
