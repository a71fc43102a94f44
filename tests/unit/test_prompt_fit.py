"""The prompt always fits the LLM's window: whole oldest turns leave the history, announced, and
instructions that leave no room for a turn are refused (voiceagent.conversation.prompt_fit)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from voiceagent.clock import VirtualClock
from voiceagent.config import Config, LlmConfig
from voiceagent.conversation.history import FunctionCallItem, FunctionCallOutputItem, History, UserItem
from voiceagent.conversation.prompt_fit import HEADROOM, MARGIN, TURN_RESERVE, PromptFitter, estimate_tokens, upper_bound
from voiceagent.errors import ProtocolError
from voiceagent.events import ItemsDropped, ResponseDone, UserTurn
from voiceagent.session import Session
from voiceagent.tools.spec import Message, Tool

from .fakes import EventLog, FakeEngines, FakeLlm

Run = Callable[..., Any]


def words(messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
    """A tokenizer for tests: one token per word, four per message frame, ten per tool."""
    return sum(len(m.content.split()) + 4 for m in messages) + 10 * len(tools)


class CountingEngine:
    """Just what the fitter asks of an engine: a window and a count."""

    def __init__(self, window: int | None, counts: bool = True) -> None:
        self.window = window
        self.counts = counts
        self.asked = 0

    async def count_tokens(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int | None:
        self.asked += 1
        return words(messages, tools) if self.counts else None


def fitter(window: int = 200, reply: int = 40, counts: bool = True) -> PromptFitter:
    return PromptFitter(CountingEngine(window, counts), window, reply)  # type: ignore[arg-type]


def sentence(n: int, word: str = "word") -> str:
    return " ".join([word] * n)


def conversation(turns: int, words_each: int = 10) -> History:
    h = History()
    for i in range(turns):
        h.add_user(sentence(words_each, f"q{i}"))
        item = h.add_assistant(i, f"a{i}")
        item.add_clause(sentence(words_each, f"a{i}"))
    return h


# --------------------------------------------------------------------------- the history's turns


def test_the_oldest_turn_is_a_user_item_with_everything_after_it_up_to_the_next() -> None:
    h = History()
    early = h.add_assistant(-1, "greeting")
    early.add_clause("Hello.")
    u1 = h.add_user("one")
    a1 = h.add_assistant(1, "a1")
    a1.add_clause("Answer one.")
    u2 = h.add_user("weather?")
    call = h.add_call(2, "c1", "get_weather", "{}")
    out = h.add_output("c1", '{"sunny": true}')
    a2 = h.add_assistant(2, "a2")
    a2.add_clause("Sunny.")
    h.add_user("three")
    assert h.oldest_turn() == ["greeting"]  # items before any user item are a turn of their own
    h.remove(h.oldest_turn())
    assert h.oldest_turn() == [u1.id, "a1"]
    h.remove(h.oldest_turn())
    assert h.oldest_turn() == [u2.id, call.id, out.id, "a2"]  # a call goes with its output
    h.remove(h.oldest_turn())
    assert h.oldest_turn() == []  # the latest turn is never offered
    assert [type(i) for i in h.items] == [UserItem]


def test_the_prompt_leaves_nothing_out_for_length() -> None:
    """Cutting is the fitter's, announced; the rendering itself keeps every item."""
    h = conversation(40, words_each=50)
    msgs = h.messages("sys", pending_user="now")
    assert len(msgs) == 1 + 80 + 1


# --------------------------------------------------------------------------- fitting


def test_a_prompt_that_fits_is_left_alone(run: Run) -> None:
    h = conversation(3)
    f = fitter()
    fitted = run(f.fit(h, lambda: h.messages("sys", pending_user="hi"), ()))
    assert fitted.dropped == [] and not fitted.shortened
    assert fitted.messages == h.messages("sys", pending_user="hi")
    assert fitted.tokens == words(fitted.messages)


def test_whole_oldest_turns_leave_with_headroom_and_the_latest_stays(run: Run) -> None:
    h = conversation(20)  # 20 exchanges of 14 + 14 tokens: 560 tokens, budget 200-40-16 = 144
    before = [i.id for i in h.items]
    f = fitter()

    def render() -> list[Message]:
        return h.messages("sys", pending_user="and now?")

    fitted = run(f.fit(h, render, ()))
    assert fitted.tokens <= f.budget
    assert fitted.tokens == words(render())
    # Whole turns, oldest first: the dropped ids are a prefix of the history, ending before a user item.
    assert fitted.dropped == before[: len(fitted.dropped)]
    assert isinstance(h.items[0], UserItem)
    assert [i.id for i in h.items] == before[len(fitted.dropped) :]
    # Headroom: the cut left at least part of the history's room free, so the next turns fit as they are.
    fixed = words([Message("system", "sys"), Message("user", "and now?")])
    assert fitted.tokens <= f.budget - HEADROOM * (f.budget - fixed) + 28  # within one turn's tokens
    h.add_user(sentence(10, "q20"))
    h.add_assistant(20, "a20").add_clause(sentence(10, "a20"))
    again = run(f.fit(h, render, ()))
    assert again.dropped == []


def test_a_tool_call_leaves_with_its_output(run: Run) -> None:
    h = History()
    h.add_user(sentence(60, "old"))
    call = h.add_call(0, "c1", "get_time", "{}")
    h.add_output("c1", sentence(40, "result"))
    h.add_user("latest question")
    f = fitter(window=160)
    fitted = run(f.fit(h, lambda: h.messages("sys"), ()))
    assert call.id in fitted.dropped
    assert not any(isinstance(i, FunctionCallItem | FunctionCallOutputItem) for i in h.items)
    assert all(m.role != "tool" for m in fitted.messages)


def test_the_latest_turn_alone_too_long_is_shortened_in_the_prompt_only(run: Run) -> None:
    h = History()
    h.add_user(sentence(500, "long"))
    f = fitter()
    fitted = run(f.fit(h, lambda: h.messages("sys", pending_user="so?"), ()))
    assert fitted.shortened and fitted.dropped == []
    assert fitted.tokens <= f.budget
    assert fitted.messages[0] == Message("system", "sys") and fitted.messages[-1] == Message("user", "so?")
    assert len(h.items) == 1 and len(h.items[0].text.split()) == 500  # the history is untouched


def test_an_engine_that_cannot_count_is_estimated_by_bytes(run: Run) -> None:
    h = conversation(60)
    f = fitter(window=300, counts=False)
    fitted = run(f.fit(h, lambda: h.messages("sys"), ()))
    assert fitted.dropped
    assert fitted.tokens == estimate_tokens(fitted.messages, ())
    assert fitted.tokens <= f.budget


def test_instructions_that_leave_no_room_for_a_turn_are_refused_with_the_sizes(run: Run) -> None:
    f = fitter(window=400, reply=40)
    tool = Tool("get_time")
    assert run(f.check_instructions("Be brief.", ())) == words([Message("system", "Be brief.")])
    room = f.budget - TURN_RESERVE - 4 - 10  # the words that still fit beside the frame and one tool
    run(f.check_instructions(sentence(room), (tool,)))
    with pytest.raises(ProtocolError) as info:
        run(f.check_instructions(sentence(room + 1), (tool,)))
    err = info.value
    assert err.code == "context_length_exceeded" and err.param == "session.instructions"
    n = room + 1 + 4 + 10
    assert f"take {n} tokens" in err.message and "context window of 400 tokens" in err.message
    assert "llm.context" in err.message and f"{40 + MARGIN} for the reply" in err.message


# --------------------------------------------------------------------------- in a session


def session_config() -> Config:
    return Config(llm=LlmConfig(max_tokens=40))


def test_a_long_text_conversation_is_answered_every_turn_and_each_cut_announced(run: Run) -> None:
    """Forty turns of text through a 200-token window: every response completes, every prompt the
    engine saw fit, and each item the model no longer sees was announced to the client."""
    llm = FakeLlm(default=["Fine", " thanks."])
    fakes = FakeEngines(llm=llm, window=200, count=words)
    budget = 200 - 40 - MARGIN

    async def main() -> None:
        session = Session(fakes.engines, session_config(), clock=VirtualClock(), session_id="sess_long")
        await session.start()
        log = EventLog(session)
        log.start()
        try:
            for turn in range(40):
                await session.add_text(sentence(12, f"t{turn}"))
                _, done = await log.wait_type(ResponseDone, response_id=await session.create_response())
                assert done.status.value == "completed", done
        finally:
            await session.aclose()
            await log.finished()
        dropped = [i for ev in log.of_type(ItemsDropped) for i in ev.item_ids]
        assert len(dropped) > 40  # most of the 80 items had to go
        assert not {i.id for i in session.history.items} & set(dropped)
        for call in llm.calls.items:
            assert words(call.messages) <= budget
        # The model's last prompt is exactly the history the client still has (before that answer).
        last = llm.calls.items[-1].messages
        assert [m.content for m in last[1:]] == [getattr(i, "text", "") for i in session.history.items[:-1]]
        assert session.metrics.value("voiceagent_context_dropped_items_total") == len(dropped)
        assert 1 <= session.metrics.value("voiceagent_context_cuts_total") < 40  # headroom: not every turn

    try:
        run(main(), 60)
    finally:
        fakes.close()


def test_instructions_too_long_for_the_window_are_refused_and_the_settings_kept(run: Run) -> None:
    fakes = FakeEngines(window=400, count=words)

    async def main() -> None:
        session = Session(fakes.engines, session_config(), clock=VirtualClock())
        await session.start()
        try:
            before = session.settings
            with pytest.raises(ProtocolError) as info:
                await session.check_update(instructions=sentence(400))
            assert info.value.code == "context_length_exceeded"
            assert session.settings == before
            await session.check_update(instructions="Short ones.")  # these fit
            tools = tuple(Tool(f"tool_{i}", sentence(30)) for i in range(30))
            with pytest.raises(ProtocolError):
                await session.check_update(tools=tools)  # tools count too
            session.update(instructions="Short ones.")
            assert session.settings.instructions == "Short ones."
        finally:
            await session.aclose()

    try:
        run(main(), 20)
    finally:
        fakes.close()


def test_concurrent_prompts_cut_once(run: Run) -> None:
    """A prefill and a turn asking for the prompt at the same instant make one cut, not two."""
    fakes = FakeEngines(window=200, count=words)

    async def main() -> None:
        session = Session(fakes.engines, session_config(), clock=VirtualClock())
        await session.start()
        log = EventLog(session)
        log.start()
        try:
            for turn in range(20):
                await session.add_text(sentence(12, f"t{turn}"))
            turn = UserTurn(t=0.0, gen=-1, session=session.id, text="hi", speculative=True)
            a, b = await asyncio.gather(session.replies.prompt(turn), session.replies.prompt(dataclasses.replace(turn)))
            assert a.messages == b.messages
            assert len(log.of_type(ItemsDropped)) <= 1
        finally:
            await session.aclose()
            await log.finished()
        assert session.metrics.value("voiceagent_context_cuts_total") == 1

    try:
        run(main(), 20)
    finally:
        fakes.close()


def test_a_prompt_under_its_byte_bound_is_not_counted(run: Run) -> None:
    h = History()
    h.add_user("Hi there.")
    engine = CountingEngine(2048)
    f = PromptFitter(engine, 2048, 80)  # type: ignore[arg-type]
    fitted = run(f.fit(h, lambda: h.messages("Be brief."), ()))
    assert engine.asked == 0 and fitted.dropped == []
    assert fitted.tokens == upper_bound(fitted.messages, ()) >= words(fitted.messages)
