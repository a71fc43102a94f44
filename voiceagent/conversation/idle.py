"""``server_vad``'s ``idle_timeout_ms`` as the conversation core counts it (sans I/O).

The count starts when the conversation falls quiet: at the end of the last reply's audio (its
heard clock), or from the ``session.update`` that sets it when nothing has been said yet.  Each
arming has a token; the shell feeds the token back when it is due, and a token that was
disarmed or re-armed since is stale.
"""

from __future__ import annotations

from voiceagent.conversation.context import CoreContext
from voiceagent.conversation.effects import ArmIdle, DisarmIdle
from voiceagent.settings import TurnDetection

__all__ = ["IdleTimeout"]


class IdleTimeout:
    """The idle timeout of one session; its arm and disarm effects go to ``sink``."""

    def __init__(self, ctx: CoreContext) -> None:
        self._ctx = ctx
        self._token: int | None = None  # the timeout armed now
        self._tokens = 0
        self._ms: int | None = None  # the idle_timeout_ms the armed timeout counts
        self.heard_end = 0.0
        """When the last reply's audio finished playing (the session's clock)."""

    @property
    def armed(self) -> bool:
        return self._token is not None

    def wanted(self) -> TurnDetection | None:
        """The turn detection that asks for an idle timeout now, if the session's does."""
        settings = self._ctx.host.settings
        td = settings.turn_detection
        if settings.kind == "realtime" and td is not None and td.type == "server_vad" and td.idle_timeout_ms is not None:
            return td
        return None

    def arm(self) -> None:
        """Count ``idle_timeout_ms`` from the end of the last reply's audio (or now, if later).
        Not while a call waits for its output (a client runs a tool: its output, then its
        ``response.create``, come next) or when the session does not ask for it."""
        self.disarm()
        td = self.wanted()
        if td is None or td.idle_timeout_ms is None or self._ctx.history.unanswered_calls():
            return
        self._tokens += 1
        self._token, self._ms = self._tokens, td.idle_timeout_ms
        self._ctx.sink.add(ArmIdle(self._tokens, max(self._ctx.clock.now(), self.heard_end) + td.idle_timeout_ms / 1000.0))

    def disarm(self) -> None:
        if self._token is not None:
            self._token = None
            self._ctx.sink.add(DisarmIdle())

    def changed(self, *, quiet: bool) -> None:
        """The settings changed: a timeout turned off is disarmed; a new value set while the
        conversation is ``quiet`` counts at once, from the same start."""
        td = self.wanted()
        if td is None:
            self.disarm()
        elif (self._token is None or td.idle_timeout_ms != self._ms) and quiet:
            self.arm()

    def reply_heard(self, end_t: float, *, completed: bool) -> None:
        """A reply (not out of band) ended; its audio plays until ``end_t``, or until now if it
        did not complete (it was cut, or never sent the rest): the count starts from there."""
        now = self._ctx.clock.now()
        self.heard_end = max(self.heard_end, end_t if completed else min(end_t, now))

    def fire(self, token: int) -> TurnDetection | None:
        """Timeout ``token`` is due: the turn detection to trigger it with, once; None when it
        is stale or the session no longer asks for it."""
        if token != self._token:
            return None
        self._token = None
        return self.wanted()
