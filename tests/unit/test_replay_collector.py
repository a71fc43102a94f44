"""``replay`` reads the server through the client core: what it records of a conversation (no
sockets: the server's codec renders the session's events, the collector is fed the text)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from voiceagent.client import RealtimeClient
from voiceagent.config import Config
from voiceagent.events import (
    AudioDelta,
    ErrorEvent,
    Event,
    InputTranscriptDone,
    OutputTranscriptDelta,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    TurnMetrics,
)
from voiceagent.replay import _Collector
from voiceagent.settings import settings_from_config
from voiceagent.transports.realtime_codec import RealtimeCodec


def test_the_collector_times_answers_on_the_audio_clock() -> None:
    codec = RealtimeCodec(settings_from_config(Config()), 24000, send_metrics=True)
    col = _Collector(RealtimeClient(), t0=100.0, speed=2.0)
    h = {"gen": 1, "session": "s"}
    r = {**h, "response_id": "r1", "item_id": "a1"}
    timeline: list[tuple[float, Event]] = [
        (101.0, InputTranscriptDone(t=0, **h, item_id="u1", text="What time is it?")),
        (101.1, ResponseCreated(t=0, **r)),
        (101.2, OutputTranscriptDelta(t=0, **r, text="It is ")),
        (101.3, AudioDelta(t=0, **r, pcm=np.ones(2400, dtype=np.int16), rate=24000, offset_ms=0.0)),
        (101.4, AudioDelta(t=0, **r, pcm=np.ones(2400, dtype=np.int16), rate=24000, offset_ms=100.0)),
    ]
    for now, ev in timeline:
        for m in codec.encode(ev):
            col.handle(json.dumps(m), now)
    assert not col.finished(1)
    for m in codec.encode(ResponseDone(t=0, **r, status=ResponseStatus.COMPLETED, text="It is noon.", audio_ms=200.0)):
        col.handle(json.dumps(m), 102.0)
    assert col.finished(1) and not col.finished(2)
    for m in codec.encode(TurnMetrics(t=0, **h, response_id="r1", spans={"first_audio_sent": 300.0})):
        col.handle(json.dumps(m), 102.1)
    (resp,) = col.responses()
    assert (resp.id, resp.first_audio_wall, resp.status) == ("r1", 101.3, "completed")
    assert resp.created_s == pytest.approx(2.2) and resp.first_audio_s == pytest.approx(2.6)  # audio seconds: wall × speed
    assert (resp.text, resp.spans) == ("It is noon.", {"first_audio_sent": 300.0})
    assert col.transcripts == [(2.0, "What time is it?")]
    for m in codec.encode(ErrorEvent(t=0, **h, code="oops", message="bad", event_id="e1")):
        col.handle(json.dumps(m), 103.0)
    assert col.errors == [{"type": "invalid_request_error", "code": "oops", "message": "bad", "param": None, "event_id": "e1"}]
