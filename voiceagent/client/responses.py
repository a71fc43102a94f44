"""What a Realtime client knows of each response, built from the typed events as they arrive.

:class:`ResponseTracker` is fed the events of :class:`~voiceagent.client.events.EventDecoder`
(by :class:`~voiceagent.client.core.RealtimeClient`) and keeps one :class:`Response` per
``response.created``: its message item, the transcript so far, how much audio came and when
the first of it did, its function calls, how it ended and the server's per-turn timeline.
Events of a response it never saw created change nothing here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from voiceagent.client.events import ResponseStarted
from voiceagent.events import (
    AudioDelta,
    CallSummary,
    Event,
    FunctionCallAdded,
    OutputTranscriptDelta,
    ResponseCreated,
    ResponseDone,
    TurnMetrics,
)

__all__ = ["Response", "ResponseTracker"]


@dataclass
class Response:
    """One response as far as it has arrived.  Times are the ``now`` its events were fed with."""

    id: str
    created_at: float
    status: str = "in_progress"
    """``in_progress`` until ``response.done``; then ``completed``, ``cancelled``, ``incomplete`` or ``failed``."""
    reason: str | None = None
    """Why it ended early (``status_details``: ``turn_detected``, ``client_cancelled``, an error…)."""
    item_id: str = ""
    """Its message item ('' until announced, or when it has none)."""
    transcript: str = ""
    """What it said (or wrote): the deltas so far; at the end, the final text the server holds
    (for a cancelled response, cut to what was heard)."""
    audio_samples: int = 0
    """Samples of reply audio received (at the wire rate)."""
    audio_ms: float = 0.0
    """Milliseconds of reply audio received."""
    first_audio_at: float | None = None
    done_at: float | None = None
    calls: list[CallSummary] = field(default_factory=list)
    """The function calls it made, in order."""
    spans: dict[str, float] = field(default_factory=dict)
    """The server's per-turn timeline (``voiceagent.turn_metrics``, which follows ``response.done``)."""
    llm_route: str | None = None
    """``ENGINE/REASON``: the LLM engine that answered and why, from the same event (None: not told)."""
    playback_gap_ms: float = 0.0
    """Silence inside the reply's audio, from the same event (the server's heard clock)."""

    @property
    def done(self) -> bool:
        return self.status != "in_progress"


class ResponseTracker:
    """The responses of one connection, oldest first; keeps the newest ``keep`` finished ones
    (and every one still in progress), so a long conversation holds bounded state."""

    def __init__(self, *, keep: int = 1000) -> None:
        self.keep = keep
        self._responses: dict[str, Response] = {}

    def __iter__(self) -> Iterator[Response]:
        return iter(list(self._responses.values()))

    def __len__(self) -> int:
        return len(self._responses)

    def get(self, response_id: str) -> Response | None:
        return self._responses.get(response_id)

    def __getitem__(self, response_id: str) -> Response:
        return self._responses[response_id]

    @property
    def current(self) -> Response | None:
        """The newest response still in progress (None: none is)."""
        return next((r for r in reversed(self._responses.values()) if not r.done), None)

    def apply(self, ev: Event) -> None:
        """Update the response ``ev`` belongs to (events of other kinds are ignored)."""
        if isinstance(ev, ResponseStarted):
            self._responses[ev.response_id] = Response(ev.response_id, ev.t)
            self._forget_old()
            return
        r = self._responses.get(getattr(ev, "response_id", ""))
        if r is None:
            return
        if isinstance(ev, ResponseCreated):
            r.item_id = ev.item_id
        elif isinstance(ev, OutputTranscriptDelta):
            r.transcript += ev.text
        elif isinstance(ev, AudioDelta):
            if r.first_audio_at is None:
                r.first_audio_at = ev.t
            r.audio_samples += len(ev.pcm)
            r.audio_ms = r.audio_samples * 1000.0 / ev.rate
        elif isinstance(ev, FunctionCallAdded):
            r.calls.append(CallSummary(ev.item_id, ev.call_id, ev.name, ev.arguments))
        elif isinstance(ev, ResponseDone):
            r.status, r.reason, r.done_at = ev.status.value, ev.reason, ev.t
            r.item_id = ev.item_id or r.item_id
            r.transcript = ev.text or r.transcript
            r.calls = list(ev.calls) or r.calls
        elif isinstance(ev, TurnMetrics):
            r.spans = dict(ev.spans)
            r.playback_gap_ms = ev.playback_gap_ms
            if ev.llm_engine is not None:
                r.llm_route = f"{ev.llm_engine}/{ev.llm_route}"

    def _forget_old(self) -> None:
        finished = [r.id for r in self._responses.values() if r.done]
        for rid in finished[: max(0, len(finished) - self.keep)]:
            del self._responses[rid]
