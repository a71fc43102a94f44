"""The stage contract and its run loop.

A stage is one asyncio task reading one bounded inbox.  For every event it calls
:meth:`Stage.handle`, which may emit to the next stage (``self.out``, awaiting back-pressure) and
notify the session (``self.ctx.notify``).  ``handle`` runs as a child task for a response event,
so that a generation bump can cancel work on a stale response without stopping the stage itself;
an input event (user audio, VAD events: nothing a bump cancels) is handled inline, without a task
of its own, because there are about fifty of them a second per session.

Error contract: an exception from ``handle`` (a model that raises) is reported to the session
as a :class:`~voiceagent.errors.StageError` and the stage goes on with the next event.
``CancelledError`` is never swallowed: cancelling :meth:`Stage.run` cancels the child and
propagates.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar

from voiceagent.clock import Clock
from voiceagent.errors import StageError
from voiceagent.events import Event, ResponseEvent
from voiceagent.pipeline.channel import Channel
from voiceagent.pipeline.generation import Generations

__all__ = ["Stage", "StageContext"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StageContext:
    """What every stage of one session shares."""

    session_id: str
    clock: Clock
    scope: Generations
    notify: Callable[[Event], Coroutine[Any, Any, None]]
    report_error: Callable[[StageError, int], Coroutine[Any, Any, None]]


class Stage(ABC):
    """Base of all stages.  Constructors do no work; :meth:`run` is the stage's task."""

    name: ClassVar[str] = "stage"

    def __init__(self, ctx: StageContext, inbox: Channel[Event], out: Channel[Event] | None) -> None:
        self.ctx = ctx
        self.inbox = inbox
        self.out = out
        self._child: asyncio.Task[None] | None = None
        self._child_gen: int | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self.handled = 0
        ctx.scope.subscribe(self._on_bump)

    @abstractmethod
    async def handle(self, event: Event) -> None:
        """Process one event.  May be cancelled at any await when its generation goes stale."""

    async def run(self) -> None:
        """Read the inbox forever.  Cancel the task running this to stop the stage."""
        while True:
            event = await self.inbox.get()
            if not isinstance(event, ResponseEvent):
                await self._handle_inline(event)
                continue
            self._child_gen = event.gen
            child = asyncio.create_task(self.handle(event), name=f"{self.name}.handle")
            self._child = child
            try:
                await asyncio.wait({child})
            except asyncio.CancelledError:
                await self._stop_with(child)
                raise
            finally:
                self._child = None
                self._child_gen = None
            self.handled += 1
            if child.cancelled():
                continue  # a stale response was cancelled by a generation bump
            exc = child.exception()
            if exc is not None:
                await self._failed(event, exc)

    async def _handle_inline(self, event: Event) -> None:
        """Handle an event no generation bump cancels in the stage's own task.  Cancelling the
        stage cancels it (and the side tasks) as it cancels a child."""
        try:
            await self.handle(event)
        except asyncio.CancelledError:
            await self._stop_with()
            raise
        except Exception as exc:  # a model that raises: reported, and the stage goes on
            self.handled += 1
            await self._failed(event, exc)
        else:
            self.handled += 1

    async def _stop_with(self, *children: asyncio.Task[None]) -> None:
        """The stage is cancelled: cancel ``children`` and the side tasks, and wait for them."""
        for task in (*children, *self._background):
            task.cancel()
        await asyncio.gather(*children, *self._background, return_exceptions=True)

    async def _failed(self, event: Event, exc: BaseException) -> None:
        log.warning("stage %s failed on %s: %r", self.name, type(event).__name__, exc)
        err = exc if isinstance(exc, StageError) else StageError(self.name, f"{type(exc).__name__}: {exc}")
        await self.ctx.report_error(err, event.gen)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run side work (a partial decode) beside the inbox loop; cancelled with the stage,
        and its failure is reported like a failure of ``handle``."""
        task = asyncio.create_task(coro, name=f"{self.name}.{name}")
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_track(self, task: asyncio.Task[Any]) -> None:
        """Cancel ``task`` with the stage (for side tasks whose result a later event awaits)."""
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.warning("stage %s background task failed: %r", self.name, exc)
            err = exc if isinstance(exc, StageError) else StageError(self.name, f"{type(exc).__name__}: {exc}")
            self.spawn(self.ctx.report_error(err, self.ctx.scope.current), "report")

    async def emit(self, event: Event) -> None:
        """Hand ``event`` to the next stage, waiting while its inbox is full."""
        if self.out is None:
            raise RuntimeError(f"stage {self.name} has no output channel")
        await self.out.put(event)

    def _on_bump(self, floor: int) -> None:
        # Called synchronously by GenerationScope: cancel work on a now-stale response and
        # clear stale items out of our inbox so they do not hold back-pressure on producers.
        if self._child is not None and self._child_gen is not None and self._child_gen < floor:
            self._child.cancel()
        self.inbox.drop_stale()
