"""llm.call_grounding: a call whose text arguments nobody said is not made, and the turn is
answered in words (voiceagent/tools/grounding.py, voiceagent/stages/llm.py)."""

from __future__ import annotations

import dataclasses

from voiceagent.config import LlmConfig
from voiceagent.events import ErrorEvent, FunctionCallAdded, ResponseDone, ResponseStatus
from voiceagent.tools.grounding import grounded, words
from voiceagent.tools.spec import Message, Tool, ToolCall

from .fakes import FakeLlm, FakeStt, FakeTurn
from .test_session import MakeFakes, Run, make_config, make_fakes, running, say_turn, tokens
from .test_session_tools import WEATHER, call

__all__ = ["make_fakes"]  # the fixture, imported for pytest

SYSTEM = Message("system", "You are the assistant of a London conference. Speakers come from Berlin and Paris.")
LONDON = '{"city": "London"}'


def test_words_that_can_tie_an_argument_to_what_was_said() -> None:
    assert words("Send an email to Anna, saying I'll be late!") == {"send", "email", "anna", "saying", "late"}
    assert words("the a of to yes") == set()


def test_an_argument_nobody_said_is_not_grounded_the_system_message_aside() -> None:
    assert not grounded(LONDON, [SYSTEM, Message("user", "Hello.")])
    assert grounded(LONDON, [SYSTEM, Message("user", "Will it rain in London this afternoon?")])
    # A shared stem counts; so do the agent's replies and earlier calls' arguments.
    assert grounded('{"city": "Berlin"}', [Message("user", "What's Berlin's weather?")])
    assert grounded(LONDON, [Message("assistant", "Shall I check London?"), Message("user", "Yes please.")])
    earlier = Message("assistant", "", tool_calls=(ToolCall("c1", "get_weather", LONDON),))
    assert grounded(LONDON, [Message("user", "Weather?"), earlier, Message("user", "And again?")])


def test_arguments_without_text_words_are_always_grounded() -> None:
    said = [Message("user", "Set a timer for five minutes.")]
    for arguments in ('{"seconds": 300}', "{}", "", '{"flag": true, "unit": "the"}', "not json"):
        assert grounded(arguments, said), arguments
    # Keys the tool does not declare are argument checking's, not grounding's (get_time's junk).
    assert grounded('{"type": "object", "city": "London"}', said, Tool("get_time", "The time.", {"type": "object", "properties": {}}))
    assert not grounded('{"type": "x", "city": "London"}', said, WEATHER)
    # Text inside lists and nested objects is read.
    assert not grounded('{"to": ["bob@example.com"], "meta": {"tag": "urgent"}}', [Message("user", "Hi there.")])
    assert grounded('{"to": ["bob@example.com"]}', [Message("user", "Email Bob.")])


Answered = tuple[ResponseDone, list[str], object]


def answered(run: Run, make_fakes: MakeFakes, said: str, script: list[list[str | ToolCall]], grounding: bool = True) -> Answered:
    fakes = make_fakes(stt=FakeStt([said]), llm=FakeLlm(script), turn=FakeTurn(0.9))
    config = make_config()
    config = dataclasses.replace(config, llm=dataclasses.replace(config.llm, call_grounding=grounding))

    async def main() -> Answered:
        async with running(fakes, config) as (session, log):
            session.update(tools=(WEATHER,))
            await say_turn(session)
            _, done = await log.wait_type(ResponseDone)
            return done, [c.tool_choice for c in fakes.llm.calls.items], log

    result: Answered = run(main(), 20)
    return result


def test_a_call_with_a_city_nobody_said_is_not_made_and_the_turn_is_answered_in_words(run: Run, make_fakes: MakeFakes) -> None:
    done, choices, log = answered(run, make_fakes, "hello", [[call(arguments=LONDON)], tokens("Hello! How can I help?")])
    assert done.status is ResponseStatus.COMPLETED and done.calls == () and done.text == "Hello! How can I help?"
    assert choices == ["auto", "none"]
    assert log.of_type(FunctionCallAdded) == [] and log.of_type(ErrorEvent) == []  # type: ignore[attr-defined]


def test_a_call_with_the_city_the_user_said_is_made(run: Run, make_fakes: MakeFakes) -> None:
    done, choices, _ = answered(run, make_fakes, "will it rain in london", [[call(arguments=LONDON)]])
    assert [(c.name, c.arguments) for c in done.calls] == [("get_weather", LONDON)]
    assert choices == ["auto"]


def test_with_call_grounding_off_the_call_is_made_as_the_model_wrote_it(run: Run, make_fakes: MakeFakes) -> None:
    done, choices, _ = answered(run, make_fakes, "hello", [[call(arguments=LONDON)]], grounding=False)
    assert [c.arguments for c in done.calls] == [LONDON]
    assert choices == ["auto"]


def test_call_grounding_is_on_by_default() -> None:
    assert LlmConfig().call_grounding is True
