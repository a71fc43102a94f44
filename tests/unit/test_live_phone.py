"""A SIP call on GPT-Live's terms (transports.live_phone.LivePhoneCall) at its seams: the accept's
session checked as ``session.start``'s, keys both ways, a sideband's ``session.close`` hanging the
call up with one ``session.closed``, and errors no sideband asked for told to every sideband.  A
real session on scripted fakes, a virtual clock, sidebands that record."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.strict import check_live_server_event
from voiceagent.clock import VirtualClock
from voiceagent.config import Config
from voiceagent.errors import ProtocolError
from voiceagent.session import Session
from voiceagent.transports.live_phone import LivePhoneCall

from .test_session import MakeFakes, Run, make_fakes

__all__ = ["make_fakes"]  # the fixture, imported for pytest


class _Sideband:
    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.ended = False

    def put(self, message: dict[str, Any]) -> None:
        self.got.append(message)

    def end(self) -> None:
        self.ended = True

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.got if m["type"] == kind]


async def _call(fakes: Any, pressed: list[str], hung_up: list[bool]) -> tuple[Session, LivePhoneCall]:
    session = Session(fakes.engines, Config(), clock=VirtualClock(), session_id="sess_phone")
    await session.start()

    async def press(key: str) -> None:
        pressed.append(key)

    async def hang_up() -> None:
        hung_up.append(True)

    return session, LivePhoneCall(session, 22050, "live_1", press=press, hang_up=hang_up, audio_allowed=lambda ms: True)


def test_the_accept_is_checked_as_session_start_and_keys_go_both_ways(run: Run, make_fakes: MakeFakes) -> None:
    async def main() -> None:
        pressed: list[str] = []
        session, call = await _call(make_fakes(), pressed, [])
        try:
            with pytest.raises(ProtocolError) as refused:
                await call.start({"type": "live", "model": "m", "audio": {"format": {"type": "audio/pcm", "rate": 24000}}})
            assert refused.value.param == "session.audio.format"  # the call negotiates its codec
            await call.start({"type": "live", "model": "gpt-live-1", "instructions": "Take messages."})
            assert session.settings.instructions == "Take messages." and call.protocol.id == "live_1"
            sideband = _Sideband()
            call.protocol.sidebands.add(sideband)
            call.key("5")
            sent = await call.protocol.handle_frame(
                json.dumps({"type": "transport.dtmf.send", "event": "#", "event_id": "k1"}), _reply(sideband)
            )
            assert sent is not None and pressed == ["#"]
            bad = await call.protocol.handle_frame(json.dumps({"type": "transport.dtmf.send", "event": "12"}), _reply(sideband))
            assert bad is None and pressed == ["#"]  # one key per event
            assert [m["event"] for m in sideband.of("transport.dtmf.received")] == ["5"]
            assert [(m["event"], m["client_event_id"]) for m in sideband.of("transport.dtmf.sent")] == [("#", "k1")]
            assert [m["error"]["param"] for m in sideband.of("error")] == ["event"]
            assert all(check_live_server_event(m) is None for m in sideband.got)
        finally:
            await call.stop("close_requested")
            await session.aclose()

    run(main())


def _reply(sideband: _Sideband) -> Any:
    async def reply(message: dict[str, Any]) -> None:
        sideband.put(message)

    return reply


def test_a_sidebands_close_hangs_up_once_and_unasked_errors_reach_every_sideband(run: Run, make_fakes: MakeFakes) -> None:
    async def main() -> None:
        hung_up: list[bool] = []
        session, call = await _call(make_fakes(), [], hung_up)
        try:
            await call.start({"type": "live", "model": "gpt-live-1"})
            first, second = _Sideband(), _Sideband()
            call.protocol.sidebands.update({first, second})
            await call.protocol.error(ProtocolError("llm_failed", "the model raised"))  # nobody's command
            assert [m["error"]["code"] for m in first.of("error")] == [m["error"]["code"] for m in second.of("error")] == ["llm_failed"]
            for _ in range(2):  # two sidebands' session.close, or one sent twice
                await call.protocol.handle_frame(json.dumps({"type": "session.close"}), _reply(first))
            assert hung_up == [True, True]  # the call's own hang-up ignores the second
            assert [m["reason"] for m in second.of("session.closed")] == ["close_requested"]
            await call.stop("remote_hangup")
            assert len(second.of("session.closed")) == 1 and second.ended  # told once, then closed
        finally:
            await session.aclose()

    run(main())
