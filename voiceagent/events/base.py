"""The header every event carries, and the mark of those that belong to one answer.

Every event carries ``session`` (the session id), ``gen`` (the generation current when it was
made) and ``t`` (seconds on the session's injected clock)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Event",
    "ResponseEvent",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """Common header of every event."""

    t: float
    gen: int
    session: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResponseEvent(Event):
    """An event that belongs to generation ``gen``; dropped once the session moves past it."""
