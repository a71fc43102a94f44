"""Per-turn timelines, latency histograms and their Prometheus text exposition."""

from __future__ import annotations

import bisect
import collections
import threading
from dataclasses import dataclass, field

__all__ = ["MARKS", "Histogram", "Metrics", "TurnTimeline"]

# The order of marks within a turn; spans are reported from ``speech_end``.
MARKS = (
    "speech_end",
    "vad_stop",
    "transcript_final",
    "turn_confirmed",
    "llm_request",
    "llm_admitted",
    "llm_first_token",
    "first_clause",
    "tts_first_audio",
    "first_audio_sent",
    "llm_done",
)


@dataclass
class TurnTimeline:
    """Clock times of the marks of one turn (first report of each mark wins)."""

    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str, t: float) -> None:
        self.marks.setdefault(name, t)

    def between_ms(self, start: str, end: str) -> float | None:
        """Milliseconds from mark ``start`` to mark ``end`` (None unless both exist)."""
        if start not in self.marks or end not in self.marks:
            return None
        return round((self.marks[end] - self.marks[start]) * 1000.0, 1)

    def spans_ms(self) -> dict[str, float]:
        """Milliseconds from the end of user speech to every other mark."""
        origin = self.marks.get("speech_end")
        if origin is None:
            return {}
        return {name: round((t - origin) * 1000.0, 1) for name, t in self.marks.items() if name != "speech_end"}


class Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.n = 0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.buckets, value)] += 1
            self.total += value
            self.n += 1

    def render(self, name: str, labels: str = "") -> list[str]:
        lines = []
        cumulative = 0
        sep = "," if labels else ""
        for bound, count in zip(self.buckets, self.counts, strict=False):
            cumulative += count
            lines.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {cumulative}')
        lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.n}')
        lines.append(f"{name}_sum{{{labels}}} {self.total}")
        lines.append(f"{name}_count{{{labels}}} {self.n}")
        return lines


_LATENCY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
_QUEUE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)


class Metrics:
    """Process-wide counters and histograms, shared by all sessions of a server."""

    def __init__(self) -> None:
        self.sessions_active = 0
        self.sessions_total = 0
        self.turns = 0
        self.barge_ins = 0
        self.errors = 0
        self.spans: dict[str, Histogram] = {m: Histogram(_LATENCY_BUCKETS) for m in MARKS[1:]}
        self.llm_queue = Histogram(_QUEUE_BUCKETS)
        self.sessions_refused = 0
        self.llm_answers: collections.Counter[tuple[str, str]] = collections.Counter()

    def observe_turn(self, spans_ms: dict[str, float], llm_queue_ms: float | None = None) -> None:
        """Count one finished spoken turn: its spans and its wait for the LLM."""
        self.turns += 1
        for name, ms in spans_ms.items():
            hist = self.spans.get(name)
            if hist is not None:
                hist.observe(ms / 1000.0)
        if llm_queue_ms is not None:
            self.llm_queue.observe(llm_queue_ms / 1000.0)

    def observe_llm_route(self, route: tuple[str, str]) -> None:
        """Count one reply by (the LLM engine that answered it, why)."""
        self.llm_answers[route] += 1

    def render(self) -> str:
        lines = [
            "# TYPE voiceagent_sessions_active gauge",
            f"voiceagent_sessions_active {self.sessions_active}",
            "# TYPE voiceagent_sessions_total counter",
            f"voiceagent_sessions_total {self.sessions_total}",
            "# HELP voiceagent_sessions_refused_total connections refused at capacity (HTTP 503)",
            "# TYPE voiceagent_sessions_refused_total counter",
            f"voiceagent_sessions_refused_total {self.sessions_refused}",
            "# TYPE voiceagent_turns_total counter",
            f"voiceagent_turns_total {self.turns}",
            "# TYPE voiceagent_barge_ins_total counter",
            f"voiceagent_barge_ins_total {self.barge_ins}",
            "# TYPE voiceagent_errors_total counter",
            f"voiceagent_errors_total {self.errors}",
            "# HELP voiceagent_span_seconds seconds from end of user speech to each pipeline mark",
            "# TYPE voiceagent_span_seconds histogram",
        ]
        for name, hist in self.spans.items():
            lines.extend(hist.render("voiceagent_span_seconds", f'mark="{name}"'))
        lines += [
            "# HELP voiceagent_llm_queue_seconds time a turn waited for the LLM's sequence state",
            "# TYPE voiceagent_llm_queue_seconds histogram",
            *self.llm_queue.render("voiceagent_llm_queue_seconds"),
            "# HELP voiceagent_llm_answers_total turns by the LLM engine that answered and why (see backends/fallback.py)",
            "# TYPE voiceagent_llm_answers_total counter",
        ]
        for (engine, reason), n in sorted(self.llm_answers.items()):
            lines.append(f'voiceagent_llm_answers_total{{engine="{engine}",reason="{reason}"}} {n}')
        return "\n".join(lines) + "\n"
