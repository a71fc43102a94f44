"""The sans-I/O Realtime client: server messages in, typed events out, responses tracked.

:class:`RealtimeClient` opens no socket and starts no task.  Whoever owns the connection (``talk
--url``, ``replay``, the integration tests' recorder, the fuzzer's good session) feeds it each
server message with the time it arrived, acts on the events it returns, and sends the messages
built by :mod:`voiceagent.client.messages` (paced by :class:`voiceagent.client.pacer.Pacer` for
audio).  One definition of the client side of the protocol, beside the server's codec.

    client = RealtimeClient()
    await ws.send(json.dumps(messages.session_update()))
    async for raw in ws:
        for ev in client.feed(raw, time.monotonic()):
            ...                                   # InputTranscriptDone, AudioDelta, ResponseDone…
    client.responses[rid].transcript               # what response rid said

Not thread-safe: feed it from one task.
"""

from __future__ import annotations

from typing import Any

from voiceagent.client.events import EventDecoder
from voiceagent.client.responses import ResponseTracker
from voiceagent.events import Event

__all__ = ["RealtimeClient"]


class RealtimeClient:
    """One connection's client-side state; see the module docstring.  ``keep``: finished
    responses kept in :attr:`responses` (the newest)."""

    def __init__(self, *, keep: int = 1000) -> None:
        self._decoder = EventDecoder()
        self.responses = ResponseTracker(keep=keep)
        """Every response seen created, oldest first (see :class:`ResponseTracker`)."""

    def feed(self, data: str | bytes | dict[str, Any], now: float = 0.0) -> list[Event]:
        """The events of one server message (text, bytes or already parsed), stamped ``now``;
        the tracked responses are updated before it returns.  Never raises on what a server
        sends (see :mod:`voiceagent.client.events` for the events and the malformed case)."""
        events = self._decoder.feed(data, now)
        for ev in events:
            self.responses.apply(ev)
        return events
