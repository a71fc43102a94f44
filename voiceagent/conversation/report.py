"""What a closed reply leaves behind: metrics, the client's turn metrics, the log line and the trace."""

from __future__ import annotations

import json
import logging
from typing import Any

from voiceagent.config import Config
from voiceagent.conversation.reply import Reply
from voiceagent.events import Event, ResponseStatus, TurnMetrics
from voiceagent.observability import tracing
from voiceagent.observability.metrics import Metrics
from voiceagent.settings import SessionSettings, Tracing

__all__ = ["Reporter", "turn_record"]

turn_log = logging.getLogger("voiceagent.session")
"""The per-turn log line keeps the logger name that dashboards and log filters already select."""


class Reporter:
    """Reports the replies of one session."""

    def __init__(self, session_id: str, config: Config, metrics: Metrics) -> None:
        self._id = session_id
        self._config = config
        self._metrics = metrics

    def report(self, reply: Reply, status: ResponseStatus, reason: str | None, now: float, settings: SessionSettings) -> Event | None:
        """Count ``reply`` (closed ``status`` for ``reason`` at ``now``), log and trace it; returns
        the :class:`TurnMetrics` to send the client (None: a text turn without an engine)."""
        spans = reply.timeline.spans_ms()
        queue_ms = reply.timeline.between_ms("llm_request", "llm_admitted")
        active = self._metrics.sessions_active
        engine, route = reply.llm_route or (None, None)
        usage = reply.usage
        self._metrics.observe_turn(status.value, spans, queue_ms)
        if reply.llm_route is not None:
            self._metrics.observe_llm_route(reply.llm_route)
        if usage is not None:
            self._metrics.observe_tokens(usage.engine, usage.prompt_tokens, usage.reused_tokens, usage.generated_tokens, usage.decode_s)
        record = turn_record(self._config, self._id, settings.voice, reply, status, reason, spans, queue_ms, active, settings.tracing)
        turn_log.info(json.dumps(record))
        tracing.record_turn(
            reply.timeline.marks,
            now,
            {k: v for k, v in record.items() if isinstance(v, str | int | float) and k != "event"}
            | ({f"tokens_{k}": v for k, v in record["tokens"].items()} if record["tokens"] else {})
            | {f"model_{k}": v for k, v in record["models"].items()}
            | (settings.tracing.attributes() if settings.tracing is not None else {}),
        )
        if not spans and reply.llm_route is None:  # a text turn has no speech timeline, but an engine
            return None
        return TurnMetrics(
            t=now,
            gen=reply.gen,
            session=self._id,
            response_id=reply.id,
            spans=spans,
            sessions_active=active,
            llm_queue_ms=queue_ms,
            llm_engine=engine,
            llm_route=route,
            playback_gap_ms=round(reply.listener.gaps_ms, 1),
        )


def turn_record(
    config: Config,
    session_id: str,
    voice: str | None,
    reply: Reply,
    status: ResponseStatus,
    reason: str | None,
    spans: dict[str, float],
    queue_ms: float | None,
    active: int,
    tracing: Tracing | None = None,
) -> dict[str, Any]:
    """The per-turn log line: what a dashboard or an incident needs, no transcript unless
    ``log_transcripts`` is on; the session's ``tracing`` labels (``session.tracing``) where set."""
    usage = reply.usage
    engine, route = reply.llm_route or (None, None)
    record: dict[str, Any] = {
        "event": "turn",
        "session": session_id,
        "response": reply.id,
        "generation": reply.gen,
        "status": status.value,
        "reason": reason,
        "spans_ms": spans,
        "sessions_active": active,
        "llm_queue_ms": queue_ms,
        "llm_engine": engine,
        "llm_route": route,
        "tokens": None
        if usage is None
        else {"prompt": usage.prompt_tokens, "reused": usage.reused_tokens, "generated": usage.generated_tokens},
        "tokens_per_s": round((usage.generated_tokens - 1) / usage.decode_s, 1)
        if usage is not None and usage.decode_s > 0 and usage.generated_tokens > 1
        else None,
        "models": {
            "vad": config.vad.model,
            "stt": config.stt.model,
            "turn": config.turn.model,
            "llm": (usage.model if usage is not None and usage.model else config.llm.model),
            "tts": voice or config.tts.model,
        },
        "audio_ms": round(reply.item.audio_ms, 1) if reply.item is not None else 0.0,
    }
    if tracing is not None:
        record["tracing"] = {
            "auto": tracing.auto,
            "workflow_name": tracing.workflow_name,
            "group_id": tracing.group_id,
            "metadata": dict(tracing.metadata),
        }
    if config.log_transcripts and reply.item is not None:
        record["text"] = reply.item.text
    return record
