"""Optional OpenTelemetry spans, one per turn, where ``opentelemetry-api`` is installed.

Each ended response becomes a span ``voiceagent.turn`` (from the end of user speech, or from the
request for a text turn, to the response's end) with the session, status, engine and token counts
as attributes, an event per pipeline mark, and a child span per stage whose both ends were marked
(``stt``, ``turn_detection``, ``llm``, ``tts``).  Spans go to whatever tracer provider the process set up
(``opentelemetry-instrument``, or the SDK configured by the embedding program); without one, the
API's default provider drops them at no cost.  Without the package this module does nothing.

The marks are times on the session's monotonic clock; they are placed on the wall clock by the
offset between the two clocks when the turn ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["STAGE_SPANS", "record_turn"]

try:
    from opentelemetry import trace
except ImportError:  # the optional package is not installed
    trace = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

STAGE_SPANS = (
    ("stt", "speech_end", "transcript_final"),
    ("turn_detection", "transcript_final", "turn_confirmed"),
    ("llm", "llm_request", "llm_done"),
    ("tts", "first_clause", "tts_first_audio"),
)
"""Child spans: (name, the mark that starts it, the mark that ends it)."""


def record_turn(marks: Mapping[str, float], now: float, attributes: Mapping[str, Any]) -> None:
    """Emit one finished turn: ``marks`` and ``now`` are on the session clock; ``attributes`` are
    set on the turn span (``None`` values are left out).  Never raises for a tracing problem: a
    turn must not fail because its span could not be recorded."""
    if trace is None:
        return
    try:
        _record(marks, now, attributes)
    except Exception:  # an exporter's or provider's failure: log it, keep serving
        log.warning("could not record the turn's OpenTelemetry span", exc_info=True)


def _record(marks: Mapping[str, float], now: float, attributes: Mapping[str, Any]) -> None:
    assert trace is not None
    tracer = trace.get_tracer("voiceagent")
    offset_ns = time.time_ns() - int(now * 1e9)

    def wall(t: float) -> int:
        return offset_ns + int(t * 1e9)

    start = min(marks.values(), default=now)
    attrs = {f"voiceagent.{k}": v for k, v in attributes.items() if v is not None}
    span = tracer.start_span("voiceagent.turn", start_time=wall(start), attributes=attrs)
    try:
        for name, t in sorted(marks.items(), key=lambda kv: kv[1]):
            span.add_event(name, timestamp=wall(t))
        context = trace.set_span_in_context(span)
        for name, begin, end in STAGE_SPANS:
            if begin in marks and end in marks:
                child = tracer.start_span(f"voiceagent.{name}", context=context, start_time=wall(marks[begin]))
                child.end(end_time=wall(marks[end]))
    finally:
        span.end(end_time=wall(now))
