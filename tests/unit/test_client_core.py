"""The client core on its own: what it makes of odd server messages (never a crash), and what it
tracks of each response.  No loop, no sockets."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

from voiceagent.client import MalformedEvent, OtherEvent, RealtimeClient, SessionEvent
from voiceagent.events import AudioDelta, ErrorEvent, InputTranscriptDone, PlaybackCleared, ResponseDone, ResponseStatus


def audio(samples: int) -> str:
    return base64.b64encode(np.arange(samples, dtype="<i2").tobytes()).decode()


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        b"\xff\xfe",
        "[1, 2]",
        '"text"',
        "{}",
        '{"type": 5}',
        '{"type": "response.created"}',
        '{"type": "response.created", "response": {"id": 7}}',
        '{"type": "response.output_audio.delta", "response_id": "r", "item_id": "i", "delta": "%%%"}',
        '{"type": "response.output_audio.delta", "response_id": "r", "item_id": "i", "delta": "AA=="}',  # one byte: odd
        '{"type": "response.done", "response": {"id": "r", "status": "in_progress"}}',
        '{"type": "response.done", "response": {"id": "r", "status": true}}',
        '{"type": "response.done", "response": "r"}',
        '{"type": "conversation.item.input_audio_transcription.completed", "transcript": "hi"}',
        '{"type": "voiceagent.turn_metrics", "response_id": "r", "spans_ms": {"a": "fast"}}',
        '{"type": "voiceagent.turn_metrics", "response_id": "r", "spans_ms": {"a": true}}',
        '{"type": "response.output_item.added", "response_id": "r", "item": []}',
        '{"type": "conversation.item.done", "item": {"type": "function_call_output"}}',
        '{"type": "error", "error": "boom"}',
    ],
)
def test_a_message_it_cannot_read_is_a_malformed_event(raw: str | bytes) -> None:
    client = RealtimeClient()
    events = client.feed(raw, 3.0)
    assert len(events) == 1 and isinstance(events[0], MalformedEvent), events
    assert events[0].t == 3.0 and events[0].problem and len(events[0].raw) <= 200
    assert len(client.responses) == 0


def test_an_unknown_or_untyped_message_is_another_event() -> None:
    client = RealtimeClient()
    msg = {"type": "rate_limits.updated", "rate_limits": []}
    assert client.feed(json.dumps(msg), 1.0) == [OtherEvent(t=1.0, gen=0, type="rate_limits.updated", message=msg)]
    assert isinstance(client.feed({"type": "made.up", "x": 1})[0], OtherEvent)
    call_item = {"type": "response.output_item.added", "response_id": "r", "item": {"id": "fc", "type": "function_call"}}
    assert isinstance(client.feed(call_item)[0], OtherEvent)
    created = client.feed({"type": "session.created", "session": {"id": "sess_1"}}, 2.0)
    assert created == [SessionEvent(t=2.0, gen=0, type="session.created", config={"id": "sess_1"})]


def test_fields_a_client_can_do_without_take_defaults() -> None:
    client = RealtimeClient()
    (err,) = client.feed({"type": "error", "error": {}})
    assert isinstance(err, ErrorEvent) and (err.code, err.message) == ("None", "None")  # shown as such to a reader
    (done,) = client.feed({"type": "conversation.item.input_audio_transcription.completed", "item_id": "u"})
    assert isinstance(done, InputTranscriptDone) and done.text == ""
    (ended,) = client.feed({"type": "response.done", "response": {"id": "r", "status": "failed"}})
    assert isinstance(ended, ResponseDone) and (ended.item_id, ended.text, ended.calls, ended.reason) == ("", "", (), None)


def _response(client: RealtimeClient, rid: str, t: float, *, status: str = "completed", item: str = "m1", text: str = "") -> list[Any]:
    out = client.feed({"type": "response.created", "response": {"id": rid, "status": "in_progress", "output": []}}, t)
    out += client.feed({"type": "response.output_item.added", "response_id": rid, "item": {"id": item, "type": "message"}}, t)
    for i, word in enumerate(("Paris ", "is ", "the capital.")):
        out += client.feed({"type": "response.output_audio_transcript.delta", "response_id": rid, "item_id": item, "delta": word}, t + i)
        out += client.feed({"type": "response.output_audio.delta", "response_id": rid, "item_id": item, "delta": audio(2400)}, t + i + 0.5)
    call = {"type": "function_call", "id": "fc1", "call_id": "c1", "name": "clock", "arguments": "{}"}
    said = {"id": item, "type": "message", "content": [{"type": "output_audio", "transcript": text}]}
    details = {"type": "cancelled", "reason": "turn_detected"} if status == "cancelled" else None
    resp = {"id": rid, "status": status, "status_details": details, "output": [said, call]}
    return out + client.feed({"type": "response.done", "response": resp}, t + 5)


def test_a_response_is_tracked_from_created_to_done() -> None:
    client = RealtimeClient()
    _response(client, "r1", 10.0, text="Paris is the capital.")
    r = client.responses["r1"]
    assert (r.created_at, r.first_audio_at, r.done_at) == (10.0, 10.5, 15.0)
    assert (r.status, r.item_id, r.transcript, r.done) == ("completed", "m1", "Paris is the capital.", True)
    assert (r.audio_samples, r.audio_ms) == (7200, 300.0)
    assert [(c.call_id, c.name) for c in r.calls] == [("c1", "clock")]
    client.feed({"type": "voiceagent.turn_metrics", "response_id": "r1", "spans_ms": {"first_audio_sent": 410}, "playback_gap_ms": 35})
    assert r.spans == {"first_audio_sent": 410.0}
    assert r.playback_gap_ms == 35.0
    assert client.responses.current is None


def test_the_transcript_is_the_deltas_until_the_server_says_what_was_kept() -> None:
    client = RealtimeClient()
    client.feed({"type": "response.created", "response": {"id": "r1"}}, 0.0)
    client.feed({"type": "response.output_audio_transcript.delta", "response_id": "r1", "item_id": "m", "delta": "Once upon "})
    client.feed({"type": "response.output_audio_transcript.delta", "response_id": "r1", "item_id": "m", "delta": "a time"})
    assert client.responses.current is client.responses["r1"]
    assert client.responses["r1"].transcript == "Once upon a time"
    events = _response(client, "r2", 20.0, status="cancelled", item="m2", text="Paris")
    r2 = client.responses["r2"]
    assert (r2.status, r2.reason, r2.transcript) == ("cancelled", "turn_detected", "Paris")  # cut to what was heard
    cleared = [e for e in events if isinstance(e, PlaybackCleared)]
    assert [(e.response_id, e.item_id) for e in cleared] == [("r2", "m2")]
    done = [e for e in events if isinstance(e, ResponseDone)]
    assert [(e.status, e.text) for e in done] == [(ResponseStatus.CANCELLED, "Paris")]
    # an empty final text keeps the deltas (a server that sends none)
    _response(client, "r3", 30.0, text="")
    assert client.responses["r3"].transcript == "Paris is the capital."
    assert [r.id for r in client.responses] == ["r1", "r2", "r3"]
    assert client.responses.current is client.responses["r1"]  # still in progress: never ended


def test_events_of_a_response_never_created_change_nothing() -> None:
    client = RealtimeClient()
    events = client.feed({"type": "response.output_audio.delta", "response_id": "ghost", "item_id": "i", "delta": audio(10)})
    assert isinstance(events[0], AudioDelta) and events[0].offset_ms == 0.0
    assert client.responses.get("ghost") is None and len(client.responses) == 0


def test_finished_responses_are_forgotten_beyond_keep() -> None:
    client = RealtimeClient(keep=2)
    client.feed({"type": "response.created", "response": {"id": "open"}})
    for k in range(5):
        _response(client, f"r{k}", float(k))
    # pruned as each response is created: the newest two finished then (r2, r3), the one still open, r4 since
    assert [r.id for r in client.responses] == ["open", "r2", "r3", "r4"]
