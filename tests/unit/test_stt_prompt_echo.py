"""The prompt-echo guard: a transcript that is only its prompt's words is decoded again unprompted."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from voiceagent.backends.whisper import WhisperStt
from voiceagent.text.stt_prompt import echoes_prompt

TOOLS_PROMPT = (
    "Get the current weather in a city. Send an email for the attendee. Remind the attendee of something in a number of "
    "minutes. Order a taxi that picks the attendee up at the main entrance."
)


def test_a_run_of_the_prompts_words_is_an_echo() -> None:
    assert echoes_prompt("Order a taxi that picks the attendee up at the main entrance.", TOOLS_PROMPT)
    assert echoes_prompt("order a taxi, that picks", TOOLS_PROMPT)  # case and punctuation aside
    assert echoes_prompt("Get the current weather", TOOLS_PROMPT)
    # The halves of two descriptions, as Whisper base wrote them for "Send an email to Anna…".
    assert echoes_prompt("Send an email for the attendee of something in a number of minutes.", TOOLS_PROMPT)


def test_speech_that_shares_words_with_the_prompt_is_not() -> None:
    assert not echoes_prompt("Book a taxi to the airport at five.", TOOLS_PROMPT)
    assert not echoes_prompt("What is the current weather in Paris?", TOOLS_PROMPT)
    assert not echoes_prompt("a taxi", TOOLS_PROMPT)  # under three words: too short to tell
    assert not echoes_prompt("the main entrance the", TOOLS_PROMPT)  # its last word in no run of three
    assert not echoes_prompt("Send an email to Anna saying that I will be late.", TOOLS_PROMPT)
    assert not echoes_prompt("Get the current weather in Paris.", TOOLS_PROMPT)
    assert not echoes_prompt("Order a taxi.", "")


class _Scripted(WhisperStt):
    """The Whisper backend with its decoding replaced: the text for each prompt it is given."""

    def __init__(self, texts: dict[str, str]) -> None:  # no model: only transcribe's logic runs
        self.texts = texts
        self.prompts: list[str] = []
        self._window_s = 0
        self._recent = OrderedDict()
        self.loops = self.cuts = self.echoes = 0

    def _encode(self, audio: Any, frames: int) -> Any:
        return object()

    def _prompt_tokens(self, prompt: str) -> list[int]:
        return [len(prompt)]

    def _generate(self, encoded: Any, language: str, repetition_penalty: float, seconds: float, prefix: list[int]) -> tuple[str, int]:
        prompt = next(p for p in self.texts if len(p) == prefix[0])
        self.prompts.append(prompt)
        return self.texts[prompt], 8


def test_a_decode_that_echoes_its_prompt_is_decoded_again_without_it() -> None:
    stt = _Scripted({TOOLS_PROMPT: "Order a taxi that picks the attendee up at the main entrance.", "": "Book a taxi to the airport."})
    audio = np.zeros(5 * 16000, dtype=np.float32)  # long enough for the words (the loop guard)
    assert stt.transcribe(audio, "en", TOOLS_PROMPT) == "Book a taxi to the airport."
    assert stt.prompts == [TOOLS_PROMPT, ""] and stt.echoes == 1


def test_a_decode_that_does_not_echo_is_kept() -> None:
    stt = _Scripted({TOOLS_PROMPT: "What is the weather in Paris?", "": "never asked"})
    audio = np.zeros(5 * 16000, dtype=np.float32)  # long enough for the words (the loop guard)
    assert stt.transcribe(audio, "en", TOOLS_PROMPT) == "What is the weather in Paris?"
    assert stt.prompts == [TOOLS_PROMPT] and stt.echoes == 0
