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
from voiceagent.events import FunctionCallAdded
from voiceagent.session import Session
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
            asked = live._speech.get_nowait()
            assert asked.out_of_band and asked.tools == ()  # said, not kept; no second delegation from it
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
