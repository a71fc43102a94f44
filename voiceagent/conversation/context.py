"""What the conversation core's parts share: the session's id, clock, generation counter,
history and settings, and the one :class:`~voiceagent.conversation.effects.Sink` their effects
collect in."""

from __future__ import annotations

from dataclasses import dataclass

from voiceagent.clock import Clock
from voiceagent.conversation.effects import Sink
from voiceagent.conversation.history import History
from voiceagent.events import ItemsDropped
from voiceagent.pipeline import Generations
from voiceagent.settings import SettingsSource

__all__ = ["CoreContext"]


@dataclass(frozen=True)
class CoreContext:
    """One session's, for the core and its parts; ``max_items``: ``server.max_history_items``."""

    session: str
    clock: Clock
    scope: Generations
    history: History
    host: SettingsSource
    sink: Sink
    max_items: int

    def trim(self) -> None:
        """Keep at most ``max_items`` items in the history; the client is told which left."""
        dropped = self.history.trim(self.max_items)
        if dropped:
            event = ItemsDropped(t=self.clock.now(), gen=self.scope.current, session=self.session, item_ids=tuple(dropped))
            self.sink.emit(event)
