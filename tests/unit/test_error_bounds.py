"""Errors are bounded: what an error event quotes of the client's input is a short excerpt, and
no error reply is larger than a fixed cap whatever the request that caused it (issue: a 200 KB
``type`` drew a 2.4 MB ``error`` event)."""

from __future__ import annotations

import json

import pytest

from voiceagent.config import Config
from voiceagent.errors import MAX_FIELD_CHARS, MAX_MESSAGE_CHARS, ProtocolError, bounded, excerpt
from voiceagent.events import ErrorEvent
from voiceagent.session import Session
from voiceagent.settings import settings_from_config
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.twilio_codec import TwilioCodec

from .fakes import FakeEngines

ERROR_CAP = 2048
"""No error event, as sent, may exceed this many bytes."""

HUGE = "x" * 200_000


def realtime() -> RealtimeCodec:
    return RealtimeCodec(settings_from_config(Config()), 22050)


def test_excerpt_keeps_short_values_whole_and_cuts_long_ones() -> None:
    assert excerpt("conversation.item.create") == repr("conversation.item.create")
    cut = excerpt(HUGE)
    assert len(cut) < 100
    assert cut.startswith("'xxxx") and "200000 characters" in cut
    assert len(excerpt(list(range(100_000)))) <= 64 + 32


def test_bounded_marks_what_it_left_out() -> None:
    assert bounded("short", 10) == "short"
    text = bounded("y" * 1000, 100)
    assert len(text) <= 100 and "more characters" in text


@pytest.mark.parametrize(
    "msg",
    [
        {"type": HUGE},
        {"type": HUGE, "event_id": HUGE},
        {"type": "session.update", "session": {"audio": {"input": {"format": {"type": HUGE}}}}},
        {"type": "session.update", "session": {"tools": [{"type": HUGE, "name": "f"}]}},
        {"type": "conversation.item.create", "item": {"type": HUGE}},
    ],
)
def test_a_huge_field_draws_an_error_under_the_cap(msg: dict[str, object]) -> None:
    codec = realtime()
    with pytest.raises(ProtocolError) as info:
        codec.decode(json.dumps(msg))
    sent = json.dumps(codec.error(info.value))
    assert len(sent.encode()) <= ERROR_CAP, len(sent)
    assert len(info.value.message) <= MAX_MESSAGE_CHARS
    assert info.value.event_id is None or len(info.value.event_id) <= MAX_FIELD_CHARS


def test_an_event_id_set_after_the_error_is_bounded_too() -> None:
    """The transport fills in the client's event_id after the session raised (realtime.py)."""
    exc = ProtocolError("item_not_found", "no item", param=HUGE)
    exc.event_id = HUGE
    assert len(exc.event_id) <= MAX_FIELD_CHARS
    assert exc.param is not None and len(exc.param) <= MAX_FIELD_CHARS


def test_a_server_error_with_a_huge_message_is_bounded_on_the_wire() -> None:
    """A model library's exception text (a prompt quoted in a ValueError, say) is cut too."""
    ev = ErrorEvent(t=0.0, gen=0, session="s", code="llm_failed", message="llm: " + HUGE, kind="server_error")
    (sent,) = realtime().encode(ev)
    assert len(json.dumps(sent).encode()) <= ERROR_CAP
    assert sent["error"]["message"].startswith("llm: xxx")


def test_an_unknown_item_is_quoted_as_an_excerpt() -> None:
    """``conversation.item.delete`` of a 200 KB id: the session's error quotes its start."""
    fakes = FakeEngines()
    try:
        session = Session(fakes.engines, Config())
        with pytest.raises(ProtocolError) as info:
            session.delete_item(HUGE)
        assert info.value.code == "item_not_found"
        assert len(info.value.message) <= 100 and "200000 characters" in info.value.message
    finally:
        fakes.close()


def test_twilio_errors_quote_an_excerpt() -> None:
    codec = TwilioCodec(22050)
    with pytest.raises(ProtocolError) as info:
        codec.decode(json.dumps({"event": HUGE}))
    assert len(info.value.message) <= MAX_MESSAGE_CHARS
