"""``talk`` in process and ``talk --url`` take one event path: the same session events, applied
directly or rendered by the server's codec and read back by the client core, make the same calls
on the conversation (the wire adds only its barge-in cue at each ``speech_started``)."""

from __future__ import annotations

import json
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

import numpy as np

from voiceagent.client import RealtimeClient
from voiceagent.config import Config
from voiceagent.events import (
    AudioDelta,
    ErrorEvent,
    Event,
    FunctionCallAdded,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscriptDelta,
    InputTranscriptDone,
    OutputTranscriptDelta,
    PlaybackCleared,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    ToolOutputAdded,
    TurnMetrics,
)
from voiceagent.settings import settings_from_config
from voiceagent.talk.conversation import Conversation, Truncation
from voiceagent.talk.handler import TalkEvents
from voiceagent.transports.realtime_codec import RealtimeCodec

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    while True:
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


class Calls:
    """Stands in for a Conversation: records what it is told (audio by its length)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any) -> list[Truncation]:
            self.calls.append((name, *(len(a) if isinstance(a, np.ndarray) else a for a in args)))
            return [Truncation(args[0], 250.0)] if name == "barge_in" and args[0] else []

        return record


H = {"t": 0.0, "gen": 1, "session": "s"}
R = {**H, "response_id": "r1", "item_id": "a1"}
TURN: list[Event] = [
    InputSpeechStarted(**H, item_id="u1", audio_ms=100.0),
    InputTranscriptDelta(**H, item_id="u1", text="What"),
    InputTranscriptDelta(**H, item_id="u1", text="What time"),
    InputSpeechStopped(**H, item_id="u1", audio_ms=900.0),
    InputTranscriptDone(**H, item_id="u1", text="What time is it?"),
    ResponseCreated(**R),
    OutputTranscriptDelta(**R, text="It is noon."),
    AudioDelta(**R, pcm=np.ones(4800, dtype=np.int16), rate=24000, offset_ms=0.0),
    FunctionCallAdded(**R, previous_item_id="a0", output_index=1, call_id="c1", name="clock", arguments="{}"),
    ToolOutputAdded(**H, item_id="o1", previous_item_id="f1", call_id="c1", output='"12:00"'),
    ResponseDone(**R, status=ResponseStatus.COMPLETED, text="It is noon.", audio_ms=200.0),
    TurnMetrics(**H, response_id="r1", spans={"first_audio_sent": 400.0}),
    ErrorEvent(**H, code="oops", message="a hiccup"),
]


def local(events: list[Event]) -> tuple[list[tuple[Any, ...]], list[tuple[str, float]]]:
    conv, cut = Calls(), []

    async def truncate(item_id: str, ms: float) -> None:
        cut.append((item_id, ms))

    handler = TalkEvents(cast(Conversation, conv), truncate)
    for ev in events:
        run(handler.apply(ev))
    return conv.calls, cut


def remote(events: list[Event]) -> tuple[list[tuple[Any, ...]], list[tuple[str, float]]]:
    codec, client = RealtimeCodec(settings_from_config(Config()), 24000, send_metrics=True), RealtimeClient()
    return local([ev for e in events for m in codec.encode(e) for ev in client.feed(json.dumps(m))])


def test_in_process_and_over_the_wire_make_the_same_calls() -> None:
    here, _ = local(TURN)
    there, _ = remote(TURN)
    assert there[0] == ("barge_in", None)  # the wire's cue: whatever still plays was talked over
    assert there[1:] == here
    assert here == [
        ("user_speaking",),
        ("user_speaking", "What"),
        ("user_speaking", "What time"),
        ("user_stopped",),
        ("user_final", "u1", "What time is it?"),
        ("response_started", "r1", "a1"),
        ("agent_text", "a1", "It is noon."),
        ("audio", "r1", "a1", 4800, 24000),
        ("tool_call", "c1", "clock", "{}"),
        ("tool_output", "c1", '"12:00"'),
        ("response_done", "r1", "a1", "completed", "It is noon."),
        ("metrics", "r1", {"first_audio_sent": 400.0}),
        ("error", "oops: a hiccup"),
    ]


def test_a_barge_in_cuts_and_truncates_on_both_paths() -> None:
    cancelled = ResponseDone(**R, status=ResponseStatus.CANCELLED, text="It is", audio_ms=100.0)
    here, cut_here = local([TURN[5], PlaybackCleared(**R, heard_ms=90.0), cancelled])
    assert here[1:] == [("barge_in", "a1"), ("response_done", "r1", "a1", "cancelled", "It is")]
    assert cut_here == [("a1", 250.0)]  # the speaker's figure, not the session's
    there, cut_there = remote([TURN[5], cancelled])  # the wire has no PlaybackCleared: the cancel says it
    assert there[1:] == here[1:] and cut_there == cut_here


def test_the_reply_text_port_decides_what_a_finished_response_shows() -> None:
    conv = Calls()

    async def truncate(item_id: str, ms: float) -> None:
        pass

    handler = TalkEvents(cast(Conversation, conv), truncate, reply_text=lambda ev: "from the history")
    run(handler.apply(TURN[10]))
    assert conv.calls == [("response_done", "r1", "a1", "completed", "from the history")]


def test_an_unreadable_server_message_is_reported() -> None:
    conv = Calls()

    async def truncate(item_id: str, ms: float) -> None:
        pass

    handler = TalkEvents(cast(Conversation, conv), truncate)
    for ev in RealtimeClient().feed('{"type": "response.done", "response": {"status": "completed"}}'):
        run(handler.apply(ev))
    assert conv.calls == [("error", "unreadable server event response.done: no 'id'")]
