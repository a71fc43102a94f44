"""Per-turn timelines and the server's Prometheus metrics (through ``prometheus-client``).

Each :class:`Metrics` owns a registry of its own (not the library's global one): a process may run
several servers (the tests do), and each ``/metrics`` must show its own sessions only.  Values
that live elsewhere (the LLM engine's load, the depth of every session's queues) are read at
scrape time by collectors registered with :meth:`Metrics.add_collector`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "MARKS", "Metrics", "TurnTimeline"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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
    "content_audio_sent",
    "llm_done",
)


@dataclass
class TurnTimeline:
    """Clock times of the marks of one turn (first report of each mark wins)."""

    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str, t: float) -> bool:
        """Record mark ``name`` at ``t`` unless it was reported before; True when this was its first report."""
        if name in self.marks:
            return False
        self.marks[name] = t
        return True

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


_LATENCY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
_QUEUE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
_RATE_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 500.0)

REFUSALS = ("unauthorized", "forbidden", "capacity", "load", "draining")
"""Why a handshake is refused: no or a wrong token (401), an origin not allowed (403), the
operator's ``server.max_sessions`` reached (503), the measured load leaving no room (503), or the
server shutting down (503)."""


class Metrics:
    """Process-wide counters and histograms, shared by all sessions of a server.

    Counters and gauges are safe to update from any thread (the library locks them).  The
    read-only properties (``sessions_active`` …) are for tests and logs.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(support_collectors_without_names=True)  # render(names) collects ours too
        self._audio_listeners: list[Callable[[str, float | None], None]] = []
        r = self.registry
        self._active = Gauge("voiceagent_sessions_active", "sessions open now", registry=r)
        self._sessions = Counter("voiceagent_sessions", "sessions opened", registry=r)
        self._refused = Counter(
            "voiceagent_sessions_refused", "handshakes refused, by reason: " + ", ".join(REFUSALS), ["reason"], registry=r
        )
        for reason in REFUSALS:
            self._refused.labels(reason)
        self._turns = Counter("voiceagent_turns", "responses ended, by status (completed, cancelled, failed)", ["status"], registry=r)
        self._barge_ins = Counter("voiceagent_barge_ins", "responses the user talked over", registry=r)
        self._resumed = Counter(
            "voiceagent_interruptions_resumed",
            "replies paused by speech over them that proved not to be an interruption (a backchannel, a noise) and went on",
            registry=r,
        )
        self._errors = Counter("voiceagent_errors", "error events sent to clients, by code", ["code"], registry=r)
        self._spans = Histogram(
            "voiceagent_span_seconds",
            "seconds from the end of user speech to each mark of the turn",
            ["mark"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self._llm_queue = Histogram(
            "voiceagent_llm_queue_seconds", "time a turn waited for the LLM's sequence state", buckets=_QUEUE_BUCKETS, registry=r
        )
        self._queue_wait = Histogram(
            "voiceagent_queue_wait_seconds",
            "time an event waited in the queue in front of a stage",
            ["queue"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self._queue_waits: dict[str, Histogram] = {}
        self._answers = Counter(
            "voiceagent_llm_answers",
            "replies by the LLM engine that answered and why (see backends/fallback.py)",
            ["engine", "reason"],
            registry=r,
        )
        self._cache = Counter(
            "voiceagent_cache_lookups",
            "semantic cache lookups by result: hit, or why not (empty, below_threshold, or the lexical guard that refused)",
            ["result"],
            registry=r,
        )
        self._tokens = Counter(
            "voiceagent_llm_turn_tokens",
            "tokens of the replies, by engine and kind (prompt, reused, generated)",
            ["engine", "kind"],
            registry=r,
        )
        self._context_cuts = Counter(
            "voiceagent_context_cuts", "times a conversation's history was cut to fit the LLM's context window", registry=r
        )
        self._context_dropped = Counter(
            "voiceagent_context_dropped_items", "history items dropped to fit the LLM's context window", registry=r
        )
        self._rate = Histogram(
            "voiceagent_llm_tokens_per_second",
            "decode speed of each reply (generated tokens / first to last token)",
            ["engine"],
            buckets=_RATE_BUCKETS,
            registry=r,
        )

    # ------------------------------------------------------------------ updates

    def session_opened(self) -> None:
        self._active.inc()
        self._sessions.inc()

    def session_closed(self) -> None:
        self._active.dec()

    def refused(self, reason: str) -> None:
        """Count one refused handshake (``reason``: one of :data:`REFUSALS`)."""
        self._refused.labels(reason).inc()

    def barge_in(self) -> None:
        self._barge_ins.inc()

    def interruption_resumed(self) -> None:
        self._resumed.inc()

    def error(self, code: str) -> None:
        self._errors.labels(code).inc()

    def context_cut(self, items: int) -> None:
        """Count one cut of a history to the LLM's window, which dropped ``items`` items."""
        self._context_cuts.inc()
        self._context_dropped.inc(items)

    def queue_wait(self, queue: str, seconds: float) -> None:
        child = self._queue_waits.get(queue)
        if child is None:  # the label lookup costs more than the observation: once per queue
            child = self._queue_waits[queue] = self._queue_wait.labels(queue)
        child.observe(max(0.0, seconds))

    def observe_turn(self, status: str, spans_ms: dict[str, float], llm_queue_ms: float | None = None) -> None:
        """Count one ended response: its status, its spans and its wait for the LLM."""
        self._turns.labels(status).inc()
        for name, ms in spans_ms.items():
            if name in MARKS:
                self._spans.labels(name).observe(ms / 1000.0)
        if llm_queue_ms is not None:
            self._llm_queue.observe(llm_queue_ms / 1000.0)

    def first_audio(self, session: str, latency_ms: float | None) -> None:
        """A reply of ``session`` (its id) sent its first audio, ``latency_ms`` after the end of
        the user's speech (None: the reply answers no speech)."""
        for listener in self._audio_listeners:
            listener(session, latency_ms)

    def on_first_audio(self, listener: Callable[[str, float | None], None]) -> None:
        """Call ``listener`` with the session's id and the latency of every reply's first audio
        (in the caller's thread: the sessions report from the event loop)."""
        self._audio_listeners.append(listener)

    def observe_cache(self, result: str) -> None:
        """Count one semantic cache lookup by its result."""
        self._cache.labels(result).inc()

    def observe_llm_route(self, route: tuple[str, str]) -> None:
        """Count one reply by (the LLM engine that answered it, why)."""
        self._answers.labels(*route).inc()

    def observe_tokens(self, engine: str, prompt: int | None, reused: int | None, generated: int, decode_s: float | None) -> None:
        """Count one reply's tokens and, when it decoded for a measurable time, its tokens/s."""
        if prompt is not None:
            self._tokens.labels(engine, "prompt").inc(prompt)
        if reused is not None:
            self._tokens.labels(engine, "reused").inc(reused)
        self._tokens.labels(engine, "generated").inc(generated)
        if decode_s is not None and decode_s > 0 and generated > 1:
            self._rate.labels(engine).observe((generated - 1) / decode_s)

    def add_collector(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Register ``collect`` to be called at each scrape (values owned by someone else)."""
        self.registry.register(_Collector(collect))

    # ------------------------------------------------------------------ reads

    def value(self, name: str, **labels: str) -> float:
        """One sample's value (0 when it has none yet), e.g. ``value("voiceagent_turns_total", status="failed")``."""
        return self.registry.get_sample_value(name, labels) or 0.0

    @property
    def sessions_active(self) -> int:
        return int(self.value("voiceagent_sessions_active"))

    @property
    def sessions_total(self) -> int:
        return int(self.value("voiceagent_sessions_total"))

    @property
    def sessions_refused(self) -> int:
        return sum(int(self.value("voiceagent_sessions_refused_total", reason=r)) for r in REFUSALS)

    @property
    def errors(self) -> int:
        return int(sum(s.value for m in self._errors.collect() for s in m.samples if s.name.endswith("_total")))

    def render(self, names: Iterable[str] = ()) -> bytes:
        """The text exposition (``GET /metrics``): every metric, or with ``names`` only the
        samples of those names (``GET /metrics?name[]=voiceagent_load``, as prometheus-client's
        own handler reads it).  Rendering everything costs a few milliseconds of the event loop;
        a poller that wants one gauge twice a second should not pay for the histograms."""
        wanted = set(names)
        return generate_latest(self.registry.restricted_registry(wanted) if wanted else self.registry)


class _Collector(Collector):
    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()

    def describe(self) -> Iterable[Metric]:
        return []  # not described in advance: registering never calls collect
