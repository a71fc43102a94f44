"""llm.call_check: later in a conversation, whether the last words ask for a tool is decided on
the prompt they would have had as the first turn (voiceagent/tools/call_check.py), and the turn
is then asked with tool_choice "required" (voiceagent/stages/llm.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from voiceagent.backends.protocols import LlmItem, LlmRequest
from voiceagent.events import ErrorEvent, FunctionCallAdded, ResponseDone, ResponseStatus
from voiceagent.tools.call_check import check_messages, opens_call
from voiceagent.tools.spec import Message

from .fakes import FakeLlm
from .test_session import MakeFakes, Run, make_config, make_fakes, running, tokens
from .test_session_tools import WEATHER, call

__all__ = ["make_fakes"]  # the fixture, imported for pytest

SYSTEM = Message("system", "Be brief.")


# --------------------------------------------------------------------------- the pure parts


def test_a_first_turn_is_not_checked_it_already_is_that_prompt() -> None:
    assert check_messages([SYSTEM, Message("user", "Email Anna.")]) is None
    assert check_messages([Message("user", "Email Anna.")]) is None


def test_the_check_reads_the_system_messages_and_the_last_user_message_only() -> None:
    second = Message("system", "Tools note.")
    history = [SYSTEM, second, Message("user", "Hi."), Message("assistant", "Hello."), Message("user", "Email Anna.")]
    assert check_messages(history) == [SYSTEM, second, Message("user", "Email Anna.")]
    # No system message at all: the last words alone.
    assert check_messages([Message("user", "Hi."), Message("assistant", "Hello."), Message("user", "Email Anna.")]) == [
        Message("user", "Email Anna.")
    ]


def test_a_prompt_that_answers_a_result_or_a_note_is_not_checked() -> None:
    called = Message("assistant", "", tool_calls=(call(),))
    after_result = [SYSTEM, Message("user", "Weather in Paris?"), called, Message("tool", "18 degrees.", tool_call_id="call_1")]
    assert check_messages(after_result) is None
    assert check_messages([*after_result, Message("system", "Answer now.")]) is None
    assert check_messages([]) is None


def test_what_opens_a_call() -> None:
    assert opens_call([call()])
    for text in ("<tool_call>", " <", "```", '{"', "{{"):
        assert opens_call([text]), text
    for text in ("The", " Sure", "", "I've sent it."):
        assert not opens_call([text]), text
    assert not opens_call([])


# --------------------------------------------------------------------------- through a session


def _second_turn(run: Run, make_fakes: MakeFakes, script: list[Any], call_check: bool = True) -> tuple[ResponseDone, list[Any], Any]:
    """Two text turns of a session offering get_weather: the first answered in words, then "what
    is the weather in Paris"; the engine plays ``script`` after the first answer.  Returns the
    second response's end, the engine's calls and the event log."""
    fakes = make_fakes(llm=FakeLlm([tokens("Lunch is at noon."), *script]))

    async def main() -> tuple[ResponseDone, list[Any], Any]:
        async with running(fakes, make_config(call_check=call_check)) as (session, log):
            session.update(tools=(WEATHER,))
            await session.add_text("when is lunch")
            await session.create_response()
            i_first, first = await log.wait_type(ResponseDone)
            assert first.text == "Lunch is at noon."
            await session.add_text("what is the weather in Paris")
            await session.create_response()
            _, done = await log.wait_type(ResponseDone, after=i_first + 1)
            return done, list(fakes.llm.calls.items), log

    return run(main(), 20)


def test_later_in_a_conversation_words_that_open_a_call_alone_make_the_turn_call(run: Run, make_fakes: MakeFakes) -> None:
    done, calls, log = _second_turn(run, make_fakes, [["<"], [call()]])
    assert [c.tool_choice for c in calls] == ["auto", "auto", "required"]
    check = calls[1]
    assert check.max_tokens == 1 and check.tools == (WEATHER,)
    # The check saw the system message and the last words, nothing between them.
    assert [m.role for m in check.messages] == ["system", "user"]
    assert check.messages[-1].content == "what is the weather in Paris"
    assert check.messages[0] == calls[2].messages[0]
    # The turn itself was asked on its whole conversation.
    assert [m.role for m in calls[2].messages] == ["system", "user", "assistant", "user"]
    assert done.status is ResponseStatus.COMPLETED and [c.name for c in done.calls] == ["get_weather"]
    assert len(log.of_type(FunctionCallAdded)) == 1


def test_words_that_do_not_open_a_call_leave_the_turn_to_decide(run: Run, make_fakes: MakeFakes) -> None:
    done, calls, _ = _second_turn(run, make_fakes, [["It"], tokens("It is sunny.")])
    assert [c.tool_choice for c in calls] == ["auto", "auto", "auto"]
    assert calls[1].max_tokens == 1
    assert done.text == "It is sunny." and done.calls == ()


def test_without_the_check_the_turn_is_asked_once(run: Run, make_fakes: MakeFakes) -> None:
    done, calls, _ = _second_turn(run, make_fakes, [tokens("It is sunny.")], call_check=False)
    assert [(c.tool_choice, c.max_tokens > 1) for c in calls] == [("auto", True), ("auto", True)]
    assert done.text == "It is sunny."


def test_a_check_the_engine_fails_leaves_the_turn_to_decide_and_tells_the_client_nothing(run: Run, make_fakes: MakeFakes) -> None:
    done, calls, log = _second_turn(run, make_fakes, [RuntimeError("the check broke"), tokens("It is sunny.")])
    assert [c.tool_choice for c in calls] == ["auto", "auto", "auto"]
    assert done.status is ResponseStatus.COMPLETED and done.text == "It is sunny."
    assert log.of_type(ErrorEvent) == []


def test_no_check_without_tools_or_with_a_choice_made(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("Lunch is at noon."), tokens("It is sunny."), tokens("Fine.")]))

    async def main() -> list[Any]:
        async with running(fakes, make_config(call_check=True)) as (session, log):
            await session.add_text("when is lunch")
            await session.create_response()
            i_done, _ = await log.wait_type(ResponseDone)
            await session.add_text("what is the weather in Paris")
            await session.create_response()  # no tools offered
            i_done, _ = await log.wait_type(ResponseDone, after=i_done + 1)
            session.update(tools=(WEATHER,), tool_choice="none")
            await session.add_text("and in Rome")
            await session.create_response()
            await log.wait_type(ResponseDone, after=i_done + 1)
            return list(fakes.llm.calls.items)

    calls = run(main(), 20)
    assert [(c.tool_choice, c.max_tokens > 1) for c in calls] == [("auto", True), ("auto", True), ("none", True)]


class HeldCheck:
    """The session's engine, with every one-token request (the call check) held until cancelled."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.held = asyncio.Event()
        self.cancelled = False
        self.requests: list[LlmRequest] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        self.requests.append(request)
        if request.max_tokens == 1:
            self.held.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        async with contextlib.aclosing(self.inner.generate(request)) as pieces:
            async for piece in pieces:
                yield piece


def test_cancelling_the_turn_during_its_check_stops_the_check_and_asks_nothing_more(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("Lunch is at noon.")]))
    held = HeldCheck(fakes.engines.llm)
    fakes.engines.llm = held

    async def main() -> ResponseDone:
        async with running(fakes, make_config(call_check=True)) as (session, log):
            session.update(tools=(WEATHER,))
            await session.add_text("when is lunch")
            await session.create_response()
            i_done, _ = await log.wait_type(ResponseDone)
            await session.add_text("what is the weather in Paris")
            await session.create_response()
            await held.held.wait()
            assert await session.cancel_response()
            _, done = await log.wait_type(ResponseDone, after=i_done + 1)
            return done

    done = run(main(), 20)
    assert done.status is ResponseStatus.CANCELLED
    assert held.cancelled
    assert [r.max_tokens == 1 for r in held.requests] == [False, True]  # the turn itself was never asked
    assert held.requests[1].key == ""  # the check holds no conversation's sequence
