"""GPT-Live's automatic acknowledgement of a client delegation (transports.live.LiveProtocol):
asked for ``acknowledgement_delay_ms`` after ``session.delegation.created``, and never once
commentary or thinking is appended first (OpenAI: "any commentary or thinking appended to the
session cancels all pending acknowledgements").  A real session on scripted fakes, a virtual clock."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from voiceagent.clock import VirtualClock
from voiceagent.config import Config
from voiceagent.config.prompts import LIVE_COMMENTARY
from voiceagent.events import FunctionCallAdded
from voiceagent.session import Session
from voiceagent.tools.spec import Message
from voiceagent.transports.live import LiveProtocol
from voiceagent.transports.live_codec import DELEGATE

from .test_session import MakeFakes, Run, make_fakes

__all__ = ["make_fakes"]  # the fixture, imported for pytest


async def _protocol(fakes: Any, clock: VirtualClock, sent: list[dict[str, Any]]) -> tuple[Session, LiveProtocol]:
    session = Session(fakes.engines, Config(), clock=clock, session_id="sess_live")
    await session.start()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def close(reason: str) -> None:
        pass

    live = LiveProtocol(session, 22050, send=send, close=close, audio_allowed=lambda ms: True, started_at=clock.now())
    start = {"type": "session.start", "session": {"model": "gpt-live-1", "delegation": {"type": "client", "acknowledgement_delay_ms": 500}}}
    assert await live.handle_frame(json.dumps(start)) is not None
    return session, live


def _delegation(session: Session) -> FunctionCallAdded:
    return FunctionCallAdded(
        t=0.0,
        gen=0,
        session=session.id,
        response_id="resp_1",
        item_id="item_1",
        previous_item_id=None,
        output_index=0,
        call_id="call_1",
        name=DELEGATE.name,
        arguments='{"task": "the weather"}',
    )


async def _settle() -> None:
    for _ in range(5):  # let the timer tasks run to their next wait
        await asyncio.sleep(0)


def test_the_acknowledgement_is_asked_for_after_the_delay(run: Run, make_fakes: MakeFakes) -> None:
    async def main() -> None:
        clock, sent = VirtualClock(), []
        session, live = await _protocol(make_fakes(), clock, sent)
        try:
            await live.on_event(_delegation(session))
            assert [m["type"] for m in sent][-1] == "session.delegation.created"
            await _settle()
            clock.advance(0.4)
            await _settle()
            assert live._speech.qsize() == 0  # not yet: 400 of 500 ms
            clock.advance(0.2)
            await _settle()
            assert live._speech.qsize() == 1
            asked, ack = live._speech.get_nowait()
            assert ack is not None  # an acknowledgement: dropped if commentary or thinking comes before it is said
            assert asked.out_of_band and asked.tools == ()  # said, not kept; no second delegation from it
        finally:
            await live.stop()
            await session.aclose()

    run(main(), 20)


def test_an_acknowledgement_already_asked_for_is_dropped_by_commentary_before_it_is_said(run: Run, make_fakes: MakeFakes) -> None:
    """Asked for while a reply still speaks (it waits its turn), then the result comes: the
    acknowledgement is not said, the result is."""

    async def main() -> None:
        clock, sent = VirtualClock(), []
        session, live = await _protocol(make_fakes(), clock, sent)
        try:
            live._idle.clear()  # a reply is speaking: what is asked for waits
            live.start()
            await live.on_event(_delegation(session))
            await _settle()
            clock.advance(0.6)
            await _settle()
            commentary = {"type": "session.commentary.append", "content": "Sunny, 18 degrees.", "delegation_id": None}
            assert await live.handle_frame(json.dumps(commentary)) is not None
            live._idle.set()  # the reply ends
            await _settle()
            assert live._speech.qsize() == 0
            assert session.active_response_id is not None  # one response: the commentary's
            assert not any(m["type"] == "error" for m in sent), sent
        finally:
            await live.stop()
            await session.aclose()

    run(main(), 20)


def test_commentary_is_the_closing_message_of_its_answers_prompt(run: Run, make_fakes: MakeFakes) -> None:
    """Commentary with no delegation is spoken from a prompt that ends with it (a system message
    after the conversation), under the session's own instructions: at the end of the
    instructions instead, the 0.5B model refused it after an answered question."""

    async def main() -> None:
        clock, sent = VirtualClock(), []
        fakes = make_fakes()
        session, live = await _protocol(fakes, clock, sent)
        try:
            live.start()
            commentary = {"type": "session.commentary.append", "content": "The museum opens at nine.", "delegation_id": None}
            assert await live.handle_frame(json.dumps(commentary)) is not None
            (call,) = await fakes.llm.calls.wait(1)
            assert call.messages[0] == Message("system", session.settings.instructions)
            assert call.messages[-1] == Message("system", LIVE_COMMENTARY.format(content="The museum opens at nine."))
            assert call.tools == ()
        finally:
            await live.stop()
            await session.aclose()

    run(main(), 20)


def test_thinking_or_commentary_cancels_every_pending_acknowledgement(run: Run, make_fakes: MakeFakes) -> None:
    async def main() -> None:
        clock, sent = VirtualClock(), []
        session, live = await _protocol(make_fakes(), clock, sent)
        try:
            await live.on_event(_delegation(session))
            await _settle()
            clock.advance(0.2)
            thinking = {"type": "session.thinking.append", "content": "Looking it up.", "delegation_id": "call_1"}
            assert await live.handle_frame(json.dumps(thinking)) is not None
            assert sent[-1]["type"] == "session.thinking.appended"
            clock.advance(1.0)
            await _settle()
            assert live._speech.qsize() == 0  # cancelled: never asked for
            assert "Looking it up." in session.settings.instructions  # silent context for later turns
        finally:
            await live.stop()
            await session.aclose()

    run(main(), 20)
