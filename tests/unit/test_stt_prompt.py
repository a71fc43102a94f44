"""The transcription prompt a session's decodes carry (voiceagent.text.stt_prompt)."""

from __future__ import annotations

import dataclasses

from voiceagent.config import Config
from voiceagent.settings import settings_from_config
from voiceagent.text.stt_prompt import transcription_prompt
from voiceagent.tools.spec import Tool

_SCHEMA = {"type": "object", "properties": {}}
BASE = settings_from_config(Config())
TOOLS = (
    Tool("get_weather", "Get the current weather\n  in a city", _SCHEMA),
    Tool("nameless", "   ", _SCHEMA),
    Tool("get_time", "Get the time. Or the date!", _SCHEMA),
)


def test_the_tools_descriptions_one_sentence_each_in_their_order() -> None:
    with_tools = dataclasses.replace(BASE, tools=TOOLS)
    # Whitespace collapsed, a full stop where none ends it, an empty description left out.
    assert transcription_prompt(with_tools, True) == "Get the current weather in a city. Get the time. Or the date!"
    assert transcription_prompt(with_tools, False) == ""  # stt.tools_prompt off
    assert transcription_prompt(BASE, True) == ""  # no tools


def test_the_clients_prompt_wins_over_the_tools_and_counts_even_without_them() -> None:
    client = dataclasses.replace(BASE, tools=TOOLS, transcription_prompt="  Anna, Bob, Cairo. ")
    assert transcription_prompt(client, True) == "Anna, Bob, Cairo."
    assert transcription_prompt(client, False) == "Anna, Bob, Cairo."
    blank = dataclasses.replace(client, transcription_prompt="   ")
    assert transcription_prompt(blank, False) == ""
