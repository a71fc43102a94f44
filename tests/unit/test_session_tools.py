"""Tool calls through a session, with scripted fake backends: each race of a tool round-trip.

The fake LLM context yields :class:`ToolCall` s between its text pieces, as the real engines do
once they have read the model's call.  The session must send each call to the client once, give
each call exactly one output (the client's, or a synthetic "cancelled" one when the conversation
goes on first), and build every prompt so that no call is left without its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from voiceagent.backends.protocols import LlmItem, LlmRequest, Routed
from voiceagent.backends.registry import warm_up
from voiceagent.clock import VirtualClock
from voiceagent.config import Config, ToolsConfig
from voiceagent.config.prompts import ANSWER_FROM_TOOLS
from voiceagent.conversation.history import CANCELLED_OUTPUT, AssistantItem, FunctionCallItem, FunctionCallOutputItem, UserItem
from voiceagent.errors import ProtocolError
from voiceagent.events import (
    AudioDelta,
    ErrorEvent,
    FunctionCallAdded,
    PlaybackCleared,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    ToolOutputAdded,
)
from voiceagent.settings import InputItem
from voiceagent.tools.spec import CALL_TOOLS, Message, Tool, ToolCall

from .fakes import FakeEngines, FakeLlm, FakeStt, FakeTts, FakeTurn, LlmCall, SequenceCheckingLlm, pause, speak
from .test_session import CHUNK_S, INSTRUCTIONS, MakeFakes, Run, make_config, make_fakes, running, say_turn, tokens

__all__ = ["make_fakes"]  # the fixture, imported for pytest

WEATHER = Tool(
    "get_weather",
    "The weather in a city now.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
PARIS = '{"city": "Paris"}'


def call(call_id: str = "call_1", arguments: str = PARIS, name: str = "get_weather") -> ToolCall:
    return ToolCall(call_id, name, arguments)


def outputs_of(items: list[Any], call_id: str) -> list[FunctionCallOutputItem]:
    return [i for i in items if isinstance(i, FunctionCallOutputItem) and i.call_id == call_id]


def test_a_call_reaches_the_client_once_and_its_output_is_used_by_the_next_response(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["what is the weather in Paris"]),
        llm=FakeLlm([[*tokens("Let me check."), call()], tokens("It is 18 degrees in Paris.")]),
        turn=FakeTurn(0.9),
    )

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(WEATHER,))
            await say_turn(session)
            i_done, done = await log.wait_type(ResponseDone)
            i_created, created = await log.wait_type(ResponseCreated)
            i_call, added = await log.wait_type(FunctionCallAdded)
            # a speculative answer's call is held until the response is released to the client
            assert i_created < i_call < i_done
            assert (added.response_id, added.call_id, added.name, json.loads(added.arguments)) == (
                created.response_id,
                "call_1",
                "get_weather",
                {"city": "Paris"},
            )
            assert added.output_index == 1  # after the spoken message
            assert done.status is ResponseStatus.COMPLETED and done.text == "Let me check."
            assert [(c.call_id, c.item_id) for c in done.calls] == [("call_1", added.item_id)]
            assert len(log.of_type(FunctionCallAdded)) == 1
            first = fakes.llm.calls.items[0]
            assert first.tools == (WEATHER,) and first.tool_choice == "auto"

            item_id = await session.add_tool_output("call_1", '{"temperature_c": 18}')
            _, out = await log.wait_type(ToolOutputAdded)
            assert (out.item_id, out.call_id, out.synthetic, out.previous_item_id) == (item_id, "call_1", False, added.item_id)
            with pytest.raises(ProtocolError) as twice:
                await session.add_tool_output("call_1", "{}")
            assert twice.value.code == "tool_output_already_received"
            with pytest.raises(ProtocolError) as unknown:
                await session.add_tool_output("call_nope", "{}")
            assert unknown.value.code == "call_not_found"

            await session.create_response()
            await log.wait_type(ResponseDone, after=i_done + 1)
            second = fakes.llm.calls.items[1]
            assert second.messages == (
                Message("system", f"{INSTRUCTIONS} {CALL_TOOLS}"),  # it may call again: it is told to call, not describe
                Message("user", "what is the weather in Paris"),
                Message("assistant", "Let me check.", (ToolCall("call_1", "get_weather", PARIS),)),
                Message("tool", '{"temperature_c": 18}', tool_call_id="call_1"),
                Message("system", ANSWER_FROM_TOOLS),  # the prompt ends with a tool result
            )
            kinds = [type(i) for i in session.history.items]
            assert kinds == [UserItem, AssistantItem, FunctionCallItem, FunctionCallOutputItem, AssistantItem]

    run(main(), 20)


def test_an_unanswered_call_is_closed_once_as_cancelled_when_the_user_goes_on(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["what is the weather in Paris", "never mind, tell me a joke"]),
        llm=FakeLlm([[call()], tokens("Why did the chicken cross the road?")]),
        turn=FakeTurn(0.9),
    )

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(WEATHER,))
            await say_turn(session)
            i_done, done = await log.wait_type(ResponseDone)
            assert done.text == "" and [c.call_id for c in done.calls] == ["call_1"]
            await say_turn(session)  # the client never sends the weather
            await log.wait_type(ResponseDone, after=i_done + 1)
            _, synthetic = await log.wait_type(ToolOutputAdded)
            assert (synthetic.call_id, synthetic.output, synthetic.synthetic) == ("call_1", CANCELLED_OUTPUT, True)
            # the second prompt shows the call with its (cancelled) result, never a dangling call
            msgs = fakes.llm.calls.items[1].messages
            assert msgs[2:] == (
                Message("assistant", "", (call(),)),
                Message("tool", CANCELLED_OUTPUT, tool_call_id="call_1"),
                Message("user", "never mind, tell me a joke"),
            )
            # no speculative answer ran while the call waited: every prompt was answered for real
            assert len(fakes.llm.calls.items) == 2
            # the client's result, arriving now, is refused: it would be a second output
            with pytest.raises(ProtocolError) as late:
                await session.add_tool_output("call_1", '{"temperature_c": 18}')
            assert late.value.code == "tool_output_already_received" and "cancelled" in late.value.message
            assert len(outputs_of(session.history.items, "call_1")) == 1
            assert len(log.of_type(ToolOutputAdded)) == 1

    run(main(), 20)


def test_an_output_sent_while_the_user_speaks_is_used_by_the_next_answer_exactly_once(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["what is the weather in Paris", "and should I take a coat"]),
        llm=FakeLlm([[call()], tokens("Yes, take a coat: it is 9 degrees.")]),
        turn=FakeTurn(0.9),
    )

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(WEATHER,))
            await say_turn(session)
            i_done, _ = await log.wait_type(ResponseDone)
            await speak(session, 320)  # the user goes on ...
            await session.add_tool_output("call_1", '{"temperature_c": 9}')  # ... as the result comes in
            await pause(session, 640)
            _, second = await log.wait_type(ResponseDone, after=i_done + 1)
            assert second.status is ResponseStatus.COMPLETED
            msgs = fakes.llm.calls.items[-1].messages
            tool_msgs = [m for m in msgs if m.role == "tool"]
            assert tool_msgs == [Message("tool", '{"temperature_c": 9}', tool_call_id="call_1")]
            assert msgs[-1] == Message("user", "and should I take a coat")
            assert [o.synthetic for o in outputs_of(session.history.items, "call_1")] == [False]
            assert [e.synthetic for e in log.of_type(ToolOutputAdded)] == [False]

    run(main(), 20)


def test_barge_in_after_the_call_was_sent_cancels_the_speech_and_the_result_is_still_used_once(run: Run, make_fakes: MakeFakes) -> None:
    reply = "Let me look that up for you right now, it takes a moment."
    fakes = make_fakes(
        stt=FakeStt(["what is the weather in Paris", "thanks"]),
        llm=FakeLlm([[*tokens(reply), call()], tokens("It is sunny.")]),
        tts=FakeTts(ms_per_word=125.0),
        turn=FakeTurn(0.9),
    )
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(lead_ms=125), clock) as (session, log):
            session.update(tools=(WEATHER,))
            await say_turn(session)
            _, created = await log.wait_type(ResponseCreated)
            _, added = await log.wait_type(FunctionCallAdded)  # sent while the speech still plays
            clock.advance(CHUNK_S * 3)
            await speak(session, 192)  # barge-in
            _, cleared = await log.wait_type(PlaybackCleared)
            i_cancelled, cancelled = await log.wait_type(ResponseDone, response_id=created.response_id)
            assert cancelled.status is ResponseStatus.CANCELLED
            assert [c.call_id for c in cancelled.calls] == [added.call_id]  # the call itself stands
            await session.add_tool_output(added.call_id, '{"sky": "clear"}')
            await pause(session, 640)
            i_next, next_created = await log.wait_type(ResponseCreated, after=i_cancelled + 1)
            # "It is sunny.": three 125 ms chunks, paced on the virtual clock (two go at once)
            for offset_ms in (125.0, 250.0):
                await log.wait_type(AudioDelta, after=i_next, response_id=next_created.response_id, offset_ms=offset_ms)
                clock.advance(CHUNK_S)
            _, second = await log.wait_type(ResponseDone, after=i_next)
            assert second.status is ResponseStatus.COMPLETED and second.text == "It is sunny."
            msgs = fakes.llm.calls.items[-1].messages
            heard = session.history.items[1]
            assert isinstance(heard, AssistantItem) and heard.heard_ms == cleared.heard_ms
            assert msgs[2] == Message("assistant", heard.text, (call(),))  # what was heard, and the call
            assert len(heard.text) < len(reply)
            assert [m for m in msgs if m.role == "tool"] == [Message("tool", '{"sky": "clear"}', tool_call_id="call_1")]
            assert len(outputs_of(session.history.items, "call_1")) == 1

    run(main(), 20)


def test_unusable_arguments_are_asked_for_again_with_the_tool_named(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["what is the weather in Paris"]),
        llm=FakeLlm([[call(arguments='{"town": "Paris"}')], [ToolCall("other", "get_weather", PARIS)]]),
        turn=FakeTurn(0.9),
    )

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(WEATHER,))
            await say_turn(session)
            _, done = await log.wait_type(ResponseDone)
            _, added = await log.wait_type(FunctionCallAdded)
            # the retry's arguments, under the first call's id
            assert (added.call_id, json.loads(added.arguments)) == ("call_1", {"city": "Paris"})
            retry = fakes.llm.calls.items[1]
            assert retry.tool_choice == "get_weather" and retry.messages == fakes.llm.calls.items[0].messages
            assert done.status is ResponseStatus.COMPLETED and log.of_type(ErrorEvent) == []

    run(main(), 20)


def test_arguments_that_stay_unusable_are_reported_and_the_session_goes_on(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["what is the weather in Paris", "hello"]),
        llm=FakeLlm([[call(arguments="{'city': }")], [call(arguments="[1, 2]")], tokens("Hello there.")]),
        turn=FakeTurn(0.9),
    )

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(WEATHER,))
            await say_turn(session)
            i_done, done = await log.wait_type(ResponseDone)
            _, err = await log.wait_type(ErrorEvent)
            assert err.code == "invalid_tool_call" and "get_weather" in err.message
            assert done.status is ResponseStatus.COMPLETED and done.calls == ()
            assert log.of_type(FunctionCallAdded) == [] and session.history.unanswered_calls() == []
            await say_turn(session)
            _, second = await log.wait_type(ResponseDone, after=i_done + 1)
            assert second.text == "Hello there."

    run(main(), 20)


CLOCK_TOOL = Tool("get_time", "The time now.", {"type": "object", "properties": {}})


@pytest.mark.parametrize(
    ("offered", "choice"),
    [((WEATHER,), "get_weather"), ((WEATHER, CLOCK_TOOL), "required")],
    ids=["one tool: named", "several: required"],
)
def test_a_call_opened_with_no_name_is_asked_for_again(run: Run, make_fakes: MakeFakes, offered: tuple[Tool, ...], choice: str) -> None:
    # The 1.5B answers some weather questions with an empty "<tools></tools>": a call, no name.
    fakes = make_fakes(
        stt=FakeStt(["is it raining in Paris"]),
        llm=FakeLlm([[call(name="", arguments="")], [ToolCall("other", "get_weather", PARIS)]]),
        turn=FakeTurn(0.9),
    )

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=offered)
            await say_turn(session)
            _, done = await log.wait_type(ResponseDone)
            _, added = await log.wait_type(FunctionCallAdded)
            assert (added.call_id, added.name, json.loads(added.arguments)) == ("call_1", "get_weather", {"city": "Paris"})
            retry = fakes.llm.calls.items[1]
            assert retry.tool_choice == choice and retry.messages == fakes.llm.calls.items[0].messages
            assert done.status is ResponseStatus.COMPLETED and log.of_type(ErrorEvent) == []

    run(main(), 20)


@pytest.mark.parametrize(
    ("first", "again", "made", "asked"),
    [
        # asked again, it names a tool that is not offered: reported, once
        ([call(name="", arguments="")], ToolCall("other", "get_stock", "{}"), [], 2),
        # beside a real call: not asked again (it would likely repeat that call under a new id)
        ([call(), call(call_id="call_2", name=" ", arguments="")], ToolCall("other", "get_weather", PARIS), ["call_1"], 1),
    ],
    ids=["answered with a tool not offered", "beside a real call"],
)
def test_a_nameless_call_that_cannot_be_made_is_reported(
    run: Run, make_fakes: MakeFakes, first: list[ToolCall], again: ToolCall, made: list[str], asked: int
) -> None:
    fakes = make_fakes(stt=FakeStt(["is it raining in Paris"]), llm=FakeLlm([first, [again]]), turn=FakeTurn(0.9))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(WEATHER, CLOCK_TOOL))
            await say_turn(session)
            _, done = await log.wait_type(ResponseDone)
            _, err = await log.wait_type(ErrorEvent)
            assert err.code == "invalid_tool_call", err
            assert [c.call_id for c in log.of_type(FunctionCallAdded)] == [c.call_id for c in done.calls] == made
            assert len(fakes.llm.calls.items) == asked

    run(main(), 20)


def test_slightly_broken_arguments_are_repaired_without_asking_again(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(["what is the weather in Paris"]), llm=FakeLlm([[call(arguments="{'city': 'Paris',")]]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(WEATHER,))
            await say_turn(session)
            await log.wait_type(ResponseDone)
            _, added = await log.wait_type(FunctionCallAdded)
            assert json.loads(added.arguments) == {"city": "Paris"}
            assert len(fakes.llm.calls.items) == 1

    run(main(), 20)


def test_response_create_overrides_the_tools_for_one_response(run: Run, make_fakes: MakeFakes) -> None:
    clock_tool = Tool("get_time", "The time now.", {"type": "object", "properties": {}})
    fakes = make_fakes(llm=FakeLlm([tokens("Sure."), tokens("Sure.")]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(WEATHER,), tool_choice="auto")
            await session.add_text("what time is it")
            await session.create_response(tools=(clock_tool,), tool_choice="required")
            i_done, _ = await log.wait_type(ResponseDone)
            await session.create_response()
            await log.wait_type(ResponseDone, after=i_done + 1)
            first, second = fakes.llm.calls.items
            assert (first.tools, first.tool_choice) == ((clock_tool,), "required")
            assert (second.tools, second.tool_choice) == ((WEATHER,), "auto")

    run(main(), 20)


# --------------------------------------------------------------------------- built-in tools


def builtin_config() -> Config:
    return dataclasses.replace(make_config(), tools=ToolsConfig(builtin=True))


def test_builtin_time_tool_runs_in_the_server_and_the_answer_uses_its_output(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["what time is it"]),
        llm=FakeLlm([[ToolCall("call_t", "get_time", "{}")], tokens("It is five past two.")]),
        turn=FakeTurn(0.9),
    )

    async def main() -> None:
        async with running(fakes, builtin_config()) as (session, log):
            await say_turn(session)
            i_first, first = await log.wait_type(ResponseDone)
            _, added = await log.wait_type(FunctionCallAdded)
            _, out = await log.wait_type(ToolOutputAdded)
            assert (added.name, out.call_id, out.synthetic) == ("get_time", "call_t", False)
            assert out.output.startswith("It is ") and " on " in out.output  # one sentence, read back by the model
            _, second = await log.wait_type(ResponseDone, after=i_first + 1)  # asked by the server itself
            assert (first.text, second.text) == ("", "It is five past two.")
            offered, answer = fakes.llm.calls.items
            assert {t.name for t in offered.tools} >= {"get_time", "set_timer"}
            assert answer.tool_choice == "none"  # the answer speaks the result, it does not call again
            assert Message("tool", out.output, tool_call_id="call_t") in answer.messages
            # Answering from a tool result: the prompt (only) closes with what to do with it.
            assert answer.messages[-1] == Message("system", ANSWER_FROM_TOOLS), answer.messages
            assert offered.messages[-1].role == "user"
            # The same system message for the answer that may not call: its cached prefix holds.
            assert offered.messages[0].content == answer.messages[0].content == f"{INSTRUCTIONS} {CALL_TOOLS}"
            assert ANSWER_FROM_TOOLS not in [m.content for m in session.history.messages("system")]

    run(main(), 20)


def test_the_answer_after_a_builtin_tool_keeps_the_responses_own_fields(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([[ToolCall("call_t", "get_time", "{}")], tokens("It is two.")]))

    async def main() -> None:
        async with running(fakes, builtin_config()) as (session, log):
            asked = await session.create_response(
                input=(InputItem("user", "What time is it?"),), metadata={"job": "clock"}, max_output_tokens=24
            )
            i_first, _ = await log.wait_type(ResponseDone, response_id=asked)
            _, out = await log.wait_type(ToolOutputAdded)
            _, answer = await log.wait_type(ResponseDone, after=i_first + 1)
            assert (answer.text, answer.metadata) == ("It is two.", {"job": "clock"})
            [created] = [c for c in log.of_type(ResponseCreated) if c.response_id == answer.response_id]
            assert created.metadata == {"job": "clock"}
            first, second = fakes.llm.calls.items
            assert first.max_tokens == second.max_tokens == 24
            # The sequel reads the response's input with the call and its result, not the conversation.
            assert second.messages[1:] == (
                Message("user", "What time is it?"),
                Message("assistant", "", (ToolCall("call_t", "get_time", "{}"),)),
                Message("tool", out.output, tool_call_id="call_t"),
                Message("system", ANSWER_FROM_TOOLS),
            )

    run(main(), 20)


def test_an_out_of_band_response_is_offered_the_clients_tools_only(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("Happy.")]))

    async def main() -> None:
        async with running(fakes, builtin_config()) as (session, log):
            session.update(tools=(WEATHER,))
            await session.add_text("Classify my mood: I am happy")
            await log.wait_type(ResponseDone, response_id=await session.create_response(out_of_band=True))
            [call] = fakes.llm.calls.items
            assert call.tools == (WEATHER,)  # no built-in tool it would never run

    run(main(), 20)


def test_start_up_primes_the_prefix_a_session_with_the_builtin_tools_asks_for(run: Run, make_fakes: MakeFakes) -> None:
    # The built-in tools' listing is a few hundred tokens at the start of every prompt: warm_up
    # must render it as the session does, or each context's first turn pays for it again.
    fakes = make_fakes(stt=FakeStt(default="what time is it"), llm=FakeLlm(default=("Hi.",)), turn=FakeTurn(0.9))
    warm_up(fakes.engines, builtin_config())
    primed, *probes = fakes.llm.calls.items

    async def main() -> LlmCall:
        async with running(fakes, builtin_config()) as (session, log):
            seen = len(fakes.llm.calls.items)
            await say_turn(session)
            await log.wait_type(ResponseDone)
            return fakes.llm.calls.items[seen]

    asked = run(main(), 20)
    assert primed.tools == asked.tools and {t.name for t in primed.tools} >= {"get_time", "set_timer"}
    assert primed.messages[0] == asked.messages[0] == Message("system", f"{INSTRUCTIONS} {CALL_TOOLS}")
    assert primed.messages[-1].role == asked.messages[-1].role == "user"
    # The start-up probes ask after the same prefix: one with the bare instructions left every
    # context holding that, and each conversation's first turn re-read the tools' listing.
    assert probes and all(p.messages[:-1] == asked.messages[:-1] and p.tools == asked.tools for p in probes)


def test_start_up_primes_and_probes_the_prefix_a_default_session_asks_for(run: Run, make_fakes: MakeFakes) -> None:
    # Without tools a session's prompt starts with the instructions and the example pairs: the
    # prime and every start-up probe must keep that prefix in the contexts.
    base = make_config()
    config = dataclasses.replace(base, llm=dataclasses.replace(base.llm, examples="User: Hi.\nAssistant: Hello! How can I help?"))
    fakes = make_fakes(stt=FakeStt(default="hello there"), llm=FakeLlm(default=("Hi.",)), turn=FakeTurn(0.9))
    warm_up(fakes.engines, config)
    startup = list(fakes.llm.calls.items)

    async def main() -> LlmCall:
        async with running(fakes, config) as (session, log):
            await say_turn(session)
            await log.wait_type(ResponseDone)
            return fakes.llm.calls.items[len(startup)]

    asked = run(main(), 20)
    assert list(asked.messages[:3]) == [
        Message("system", INSTRUCTIONS),
        Message("user", "Hi."),
        Message("assistant", "Hello! How can I help?"),
    ]
    assert len(startup) > 1 and all(c.messages[:-1] == asked.messages[:-1] and c.tools == asked.tools == () for c in startup)


def test_a_client_tool_of_the_same_name_wins_over_the_builtin(run: Run, make_fakes: MakeFakes) -> None:
    mine = Tool("get_time", "The time on the client's clock.", {"type": "object", "properties": {}})
    fakes = make_fakes(stt=FakeStt(["what time is it"]), llm=FakeLlm([[ToolCall("call_t", "get_time", "{}")]]))

    async def main() -> None:
        async with running(fakes, builtin_config()) as (session, log):
            session.update(tools=(mine,))
            await say_turn(session)
            await log.wait_type(ResponseDone)
            await log.wait_type(FunctionCallAdded)
            assert log.of_type(ToolOutputAdded) == []  # the client runs it
            assert [t for t in fakes.llm.calls.items[0].tools if t.name == "get_time"] == [mine]
            assert session.history.unanswered_calls()[0].call_id == "call_t"

    run(main(), 20)


def test_a_builtin_timer_speaks_up_when_due_on_the_session_clock(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["remind me in a minute to stretch"]),
        llm=FakeLlm(
            [[ToolCall("call_r", "set_timer", '{"seconds": 60, "label": "stretch"}')], tokens("Okay."), tokens("Time to stretch.")]
        ),
        turn=FakeTurn(0.9),
    )
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, builtin_config(), clock) as (session, log):
            # Long enough for its seven words: the STT guard cuts a shorter clip's text (to
            # "remind me in a minute to", which then waits as unfinished).
            await say_turn(session, speech_ms=1200)
            _, out = await log.wait_type(ToolOutputAdded)
            assert out.output == "The timer is set: stretch, in 60 seconds."
            i_ok, ok = await log.wait_type(ResponseDone, text="Okay.")
            assert log.of_type(ResponseCreated)[-1].response_id == ok.response_id  # nothing more, until ...
            clock.advance(60.0)  # ... the timer (started with the call, long before "Okay." ended) is due
            _, due = await log.wait_type(ResponseDone, after=i_ok + 1)
            assert due.text == "Time to stretch."
            prompt = fakes.llm.calls.items[2]
            assert "stretch" in prompt.messages[0].content and prompt.tool_choice == "none"

    run(main(), 20)


def test_a_timer_due_in_a_transcription_session_gives_up_instead_of_spinning(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["remind me in a minute to stretch"]),
        llm=FakeLlm([[ToolCall("call_r", "set_timer", '{"seconds": 60, "label": "stretch"}')], tokens("Okay.")]),
        turn=FakeTurn(0.9),
    )
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, builtin_config(), clock) as (session, log):
            await say_turn(session, speech_ms=1200)
            await log.wait_type(ResponseDone, text="Okay.")
            session.update(kind="transcription")
            [timer] = session.replies.running("timer")
            answered = len(log.of_type(ResponseCreated))
            clock.advance(60.0)
            await asyncio.wait_for(asyncio.shield(timer), 5)
            assert timer.exception() is None
            assert len(log.of_type(ResponseCreated)) == answered and session.active_response_id is None
            assert len(fakes.llm.calls.items) == 2  # no announcement

    run(main(), 20)


AGAIN = ToolCall("call_again", "get_weather", '{"city":"Paris"}')
"""The weather call repeated after its result is in the conversation."""


def answer_after_the_weather(run: Run, fakes: FakeEngines) -> tuple[ResponseDone, Any]:
    """A spoken weather question the engine answers with a call; its result is added and a
    response asked for: that response's end, and the session's event log."""

    async def main() -> tuple[ResponseDone, Any]:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(WEATHER,))
            await say_turn(session)
            i_done, _ = await log.wait_type(ResponseDone)
            await session.add_tool_output("call_1", "It is 18 degrees in Paris.")
            await session.create_response()
            _, answer = await log.wait_type(ResponseDone, after=i_done + 1)
            return answer, log

    return run(main(), 20)


def weather_fakes(make_fakes: MakeFakes, second: list[str | ToolCall], *rest: list[str | ToolCall]) -> FakeEngines:
    return make_fakes(stt=FakeStt(["what is the weather in Paris"]), llm=FakeLlm([[call()], second, *rest]), turn=FakeTurn(0.9))


def test_a_model_that_repeats_the_call_it_has_the_result_of_answers_instead(run: Run, make_fakes: MakeFakes) -> None:
    fakes = weather_fakes(make_fakes, [AGAIN], tokens("It is 18 degrees."))
    answer, log = answer_after_the_weather(run, fakes)
    assert answer.text == "It is 18 degrees." and answer.calls == ()
    assert len(log.of_type(FunctionCallAdded)) == 1  # the repeat was never sent
    assert [c.tool_choice for c in fakes.llm.calls.items] == ["auto", "auto", "none"]


def turn_records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The per-turn log lines (voiceagent.conversation.report) caught so far."""
    return [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.name == "voiceagent.session" and r.getMessage().startswith('{"event": "turn"')
    ]


def test_a_reply_cut_at_a_repeated_call_counts_the_pieces_it_read_as_its_tokens(
    run: Run, make_fakes: MakeFakes, caplog: pytest.LogCaptureFixture
) -> None:
    # The second answer says something, then repeats the call it has the result of: the stage
    # closes that stream before the engine's usage (its last item) comes.
    with caplog.at_level(logging.INFO, logger="voiceagent.session"):
        answer, _ = answer_after_the_weather(run, weather_fakes(make_fakes, ["Let", " me", " see.", AGAIN]))
    assert answer.text == "Let me see." and answer.calls == ()
    first, second = [r["tokens"] for r in turn_records(caplog)]
    assert first["generated"] == 1  # ran to its end: the engine's own count
    assert second["generated"] == 4 and second["prompt"] is None  # three words and the call, read before the cut


class Routes:
    """The session's engine, each generation reporting the next route of ``reasons`` (a
    :class:`Routed` item before its first piece), as a router would."""

    def __init__(self, inner: Any, reasons: list[str]) -> None:
        self.inner, self.reasons = inner, reasons

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        yield Routed("big", self.reasons.pop(0))
        async with contextlib.aclosing(self.inner.generate(request)) as pieces:
            async for piece in pieces:
                yield piece


def test_an_answer_asked_again_in_words_keeps_the_route_of_the_attempt_that_spoke_first(
    run: Run, make_fakes: MakeFakes, caplog: pytest.LogCaptureFixture
) -> None:
    fakes = weather_fakes(make_fakes, [AGAIN], tokens("It is 18 degrees."))
    fakes.engines.llm = Routes(fakes.engines.llm, ["large.primary", "large.primary", "small:thanks.primary"])
    with caplog.at_level(logging.INFO, logger="voiceagent.session"):
        answer_after_the_weather(run, fakes)
    records = turn_records(caplog)
    # The second reply's first attempt (the repeated call) was routed "large"; the words asked
    # for after it do not rename the route already reported for that reply.
    assert [r["llm_route"] for r in records] == ["large.primary", "large.primary"]
    # Its tokens are both attempts': the cut one's call (1 piece) and the answer's four.
    assert records[1]["tokens"]["generated"] == 1 + len(tokens("It is 18 degrees."))


INVENTED = ToolCall("call_x", "get_largest_planet", '{"type": "object"}')
"""A call of a tool nobody offered, as the 0.5B writes for a plain question."""


@dataclasses.dataclass
class Answered:
    done: ResponseDone
    choices: list[str]
    """The tool_choice of each request the engine got, in order."""
    log: Any


def answer_with_weather_offered(run: Run, make_fakes: MakeFakes, said: str, script: list[list[str | ToolCall]]) -> Answered:
    """One spoken turn of a session offering get_weather, the engine answering with ``script``."""
    fakes = make_fakes(stt=FakeStt([said]), llm=FakeLlm(script), turn=FakeTurn(0.9))

    async def main() -> Answered:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(WEATHER,))
            await say_turn(session)
            _, done = await log.wait_type(ResponseDone)
            return Answered(done, [c.tool_choice for c in fakes.llm.calls.items], log)

    return run(main(), 20)


def test_a_call_of_a_tool_nobody_offered_is_dropped_and_the_question_answered_in_words(run: Run, make_fakes: MakeFakes) -> None:
    a = answer_with_weather_offered(run, make_fakes, "which is the largest planet", [[INVENTED], tokens("Jupiter is the largest planet.")])
    assert a.done.status is ResponseStatus.COMPLETED and a.done.text == "Jupiter is the largest planet." and a.done.calls == ()
    assert a.choices == ["auto", "none"]
    assert a.log.of_type(FunctionCallAdded) == [] and a.log.of_type(ErrorEvent) == []


def test_an_engine_that_invents_the_call_again_under_none_is_asked_only_twice(run: Run, make_fakes: MakeFakes) -> None:
    # vLLM's parser reads calls whatever tool_choice says: the answer in words is asked for once.
    a = answer_with_weather_offered(run, make_fakes, "which is the largest planet", [[INVENTED], [INVENTED]])
    assert a.done.status is ResponseStatus.COMPLETED and a.done.calls == ()
    assert a.choices == ["auto", "none"]


def test_an_invented_call_beside_a_real_one_is_dropped_without_asking_again(run: Run, make_fakes: MakeFakes) -> None:
    a = answer_with_weather_offered(run, make_fakes, "what is the weather in Paris", [[call(), INVENTED]])
    assert [c.name for c in a.done.calls] == ["get_weather"]
    assert a.choices == ["auto"]


# --------------------------------------------------------------------------- output modalities


def test_a_text_only_response_sends_text_and_no_audio_and_the_next_one_speaks(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("Paris is the capital."), tokens("It is Paris.")]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await session.add_text("what is the capital of France")
            await session.create_response(audio=False)
            i_done, done = await log.wait_type(ResponseDone)
            _, created = await log.wait_type(ResponseCreated)
            assert created.audio is False and done.text == "Paris is the capital." and done.audio_ms == 0.0
            assert [d for d in log.of_type(AudioDelta) if d.response_id == created.response_id] == []
            assert fakes.tts.calls.items == []  # nothing was synthesised
            session.update(audio=True)
            await session.create_response()
            _, spoken = await log.wait_type(ResponseDone, after=i_done + 1)
            assert spoken.audio_ms > 0 and fakes.tts.calls.items

    run(main(), 20)


def test_new_client_tools_are_prefilled_before_the_next_turn(run: Run) -> None:
    # A client's tools are a few hundred prompt tokens the next turn would otherwise evaluate.
    context = SequenceCheckingLlm("ctx", pieces=2)
    fakes = FakeEngines(contexts=[context])
    try:

        async def main() -> None:
            async with running(fakes, make_config()) as (session, _log):
                session.update(tools=(WEATHER,))
                await context.prefill_prompts.wait(1)
                assert context.prefill_prompts.items == [(f"{INSTRUCTIONS} {CALL_TOOLS}", ("get_weather",))]
                assert context.prefills.items == [""]  # the prefix only: no words of a turn yet

        run(main(), 20)
    finally:
        fakes.close()


def test_no_idle_timeout_while_the_client_runs_a_tool(run: Run, make_fakes: MakeFakes) -> None:
    """A reply that ends with a call waits for the client's tool, however long it takes: the idle
    timeout neither arms nor fires over it (it would answer the call's silence and close the call)."""
    from voiceagent.events import InputTimeoutTriggered
    from voiceagent.settings import TurnDetection

    fakes = make_fakes(llm=FakeLlm([[*tokens("Let me check."), call()], tokens("It is 18 degrees.")]))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(), clock) as (session, log):
            session.update(tools=(WEATHER,), turn_detection=TurnDetection(0.5, 96, 320, idle_timeout_ms=2000))
            await session.add_text("What is the weather in Paris?")
            i_done, _ = await log.wait_type(ResponseDone, response_id=await session.create_response())
            assert not session.replies.core.idle_armed
            clock.advance(30.0)
            await asyncio.sleep(0)
            assert log.of_type(InputTimeoutTriggered) == []
            await session.add_tool_output("call_1", '{"temperature_c": 18}')
            await log.wait_type(ResponseDone, after=i_done + 1, response_id=await session.create_response())
            assert session.replies.core.idle_armed  # the answer ended: now the count starts

    run(main(), 20)
