"""GPT-Live sessions that dial out (voiceagent.transports.live_outbound), at the seams: the create
request read strictly before anything is dialled, the failure codes of an unanswered call, and a
sideband told the call's progress, in order, once each."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from voiceagent.errors import ProtocolError
from voiceagent.transports.live_outbound import follow_placed, is_sip_create, place_live, transport_failure
from voiceagent.transports.phone_calls import OutboundCall, PhoneCalls, call_control

SESSION = {"type": "live", "model": "gpt-live-1"}


class Dialer:
    def __init__(self) -> None:
        self.dialled: list[tuple[str, str, float]] = []
        self.hung_up: list[str] = []

    async def dial(self, call_id: str, uri: str, timeout_s: float) -> None:
        self.dialled.append((call_id, uri, timeout_s))

    async def hang_up(self, call_id: str) -> None:
        self.hung_up.append(call_id)


def body(**transport: Any) -> bytes:
    return json.dumps({"session": SESSION, "transport": {"type": "sip", **transport}}).encode()


def test_only_a_sip_transport_is_a_call_out() -> None:
    assert is_sip_create(body(to="sip:a@b"))
    assert not is_sip_create(json.dumps({"session": SESSION, "transport": {"type": "webrtc", "sdp": "v=0"}}).encode())
    assert not is_sip_create(b"not json")


def test_a_good_request_dials_and_answers_the_new_session(run: Any) -> None:
    calls = PhoneCalls()
    calls.dialer = dialer = Dialer()
    status, created = run(place_live(calls, body(to="sip:bob@10.0.0.7", timeout_s=12)))
    assert status == 201
    live_id = created["session"]["id"]
    placed = calls.placed_live(live_id)
    assert (
        placed is not None
        and placed.live_session == SESSION
        and created["transport"] == {"type": "sip", "to": "sip:bob@10.0.0.7", "call_id": placed.id}
    )
    assert dialer.dialled == [(placed.id, "sip:bob@10.0.0.7", 12.0)]
    assert placed.as_object()["live_session_id"] == live_id


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        (body(to="mailto:bob@example.com"), "transport.to"),
        (body(to="sip:a@b", timeout_s=0), "transport.timeout_s"),
        (body(to="sip:a@b", sdp="v=0"), "transport.sdp"),
        (json.dumps({"transport": {"type": "sip", "to": "sip:a@b"}}).encode(), "session"),
        (json.dumps({"session": {"type": "live"}, "transport": {"type": "sip", "to": "sip:a@b"}}).encode(), "session.model"),
        (
            json.dumps(
                {
                    "session": {**SESSION, "audio": {"format": {"type": "audio/pcmu", "rate": 8000}}},
                    "transport": {"type": "sip", "to": "sip:a@b"},
                }
            ).encode(),
            "session.audio.format",
        ),
    ],
)
def test_a_bad_request_is_refused_and_nothing_is_dialled(run: Any, request_body: bytes, param: str) -> None:
    calls = PhoneCalls()
    calls.dialer = dialer = Dialer()
    with pytest.raises(ProtocolError) as err:
        run(place_live(calls, request_body))
    assert err.value.param == param and not dialer.dialled and not calls.placed


def test_without_the_sip_gateway_the_create_is_503(run: Any) -> None:
    status, error = run(place_live(PhoneCalls(), body(to="sip:a@b")))
    assert status == 503 and error["error"]["code"] == "sip_off"


@pytest.mark.parametrize(
    ("sip_status", "reason", "code"),
    [
        (486, "Busy Here", "busy"),
        (603, "Decline", "declined"),
        (487, "no answer", "no_answer"),
        (404, "Not Found", "call_failed"),
        (None, "unreachable", "call_failed"),
    ],
)
def test_an_unanswered_calls_failure_code(sip_status: int | None, reason: str, code: str) -> None:
    call = OutboundCall("rtc_1", "sip:bob@x", None, status="ended", sip_status=sip_status, reason=reason, live_id="live_1")
    got, message = transport_failure(call)
    assert got == code and reason in message and "sip:bob@x" in message


class Socket:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.closed: tuple[int, str] | None = None
        self.gone = asyncio.Event()
        self.arrived = asyncio.Condition()

    async def wait_closed(self) -> None:
        await self.gone.wait()

    async def told(self, n: int) -> None:
        """Until ``n`` messages have been sent."""
        async with self.arrived:
            await self.arrived.wait_for(lambda: len(self.sent) >= n)

    async def send(self, text: str) -> None:
        async with self.arrived:
            self.sent.append(json.loads(text))
            self.arrived.notify_all()

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


def test_a_sideband_is_told_ringing_then_answered_once_each_and_goes_on_when_the_session_runs(run: Any) -> None:
    call = OutboundCall("rtc_1", "sip:bob@x", None, live_id="live_1")
    ws = Socket()
    running = False

    def started() -> bool:
        return running

    async def scenario() -> bool:
        nonlocal running
        follow = asyncio.create_task(follow_placed(ws, call, started))  # type: ignore[arg-type]
        call.status = "ringing"
        call.notify()
        await ws.told(1)
        call.notify()  # no change: nothing told again
        call.status = "answered"
        call.notify()
        await ws.told(2)
        running = True
        call.notify()
        return await asyncio.wait_for(follow, 5)

    assert run(scenario()) is True
    assert [e["type"] for e in ws.sent] == ["transport.ringing", "transport.answered"] and ws.closed is None
    assert {e["session_id"] for e in ws.sent} == {"live_1"}


def test_a_sideband_of_a_call_not_answered_is_told_why_and_closed(run: Any) -> None:
    call = OutboundCall("rtc_1", "sip:bob@x", None, status="ended", sip_status=486, reason="Busy Here", live_id="live_1")
    ws = Socket()
    assert run(follow_placed(ws, call, lambda: False)) is False  # type: ignore[arg-type]
    assert [e["type"] for e in ws.sent] == ["transport.failed"] and ws.sent[0]["error"]["code"] == "busy"
    assert ws.closed == (1000, "the call ended")


def test_a_sideband_that_goes_away_while_the_phone_rings_stops_being_followed(run: Any) -> None:
    call = OutboundCall("rtc_1", "sip:bob@x", None, status="ringing", live_id="live_1")
    ws = Socket()

    async def scenario() -> bool:
        follow = asyncio.create_task(follow_placed(ws, call, lambda: False))  # type: ignore[arg-type]
        await ws.told(1)
        ws.gone.set()  # the client closed: no status change needed to notice
        return await asyncio.wait_for(follow, 5)

    assert run(scenario()) is False
    assert [e["type"] for e in ws.sent] == ["transport.ringing"]


def test_a_sideband_of_a_call_that_was_answered_and_has_ended_is_closed_without_a_failure(run: Any) -> None:
    calls = PhoneCalls()
    calls.dialer = Dialer()
    _, created = run(place_live(calls, body(to="sip:bob@x")))
    placed = calls.placed_live(created["session"]["id"])
    assert placed is not None
    calls.report({"id": placed.id, "status": "answered"})
    calls.report({"id": placed.id, "status": "ended", "sip_status": 200, "reason": "Normal call clearing"})
    ws = Socket()
    assert run(follow_placed(ws, placed, lambda: False)) is False  # type: ignore[arg-type]
    assert ws.sent == [] and ws.closed == (1000, "the call ended")


def test_a_dial_that_fails_ends_the_record_and_is_a_503(run: Any) -> None:
    class Broken(Dialer):
        async def dial(self, call_id: str, uri: str, timeout_s: float) -> None:
            from voiceagent.errors import VoiceAgentError

            raise VoiceAgentError("the SIP gateway is not running")

    calls = PhoneCalls()
    calls.dialer = Broken()
    status, error = run(place_live(calls, body(to="sip:bob@x")))
    assert status == 503 and error["error"]["code"] == "sip_unavailable"
    (record,) = calls.placed.values()
    assert record.status == "ended" and "not dialled" in (record.reason or "")


def test_a_session_still_dialling_is_hung_up_by_its_gpt_live_id(run: Any) -> None:
    calls = PhoneCalls()
    calls.dialer = dialer = Dialer()
    _, created = run(place_live(calls, body(to="sip:bob@x")))
    placed = calls.placed_live(created["session"]["id"])
    assert placed is not None
    status, error = run(call_control(calls, created["session"]["id"], "hangup", b"{}", "live"))
    assert (status, error) == (200, None) and dialer.hung_up == [placed.id]
    status, _ = run(call_control(calls, "live_nobody", "hangup", b"{}", "live"))
    assert status == 404
