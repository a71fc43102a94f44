"""A circuit breaker in front of the configured LLM: a turn it cannot answer in time goes to a fallback.

The rule is the field's usual circuit breaker (Hystrix, resilience4j, Envoy's outlier
detection), applied per turn:

* **Closed** (healthy): every turn asks the primary engine.  If the primary raises before its
  first piece of text, or sends none within ``first_token_budget_s``, its request is closed (for
  the engines here that aborts it: vLLM's ``abort``, an HTTP stream dropped) and the *same* turn
  is answered by the fallback engine.  ``failures`` such turns in a row open the breaker.
* **Open**: turns go straight to the fallback, paying nothing for the broken primary.
* **Half-open**: ``reset_s`` after opening, the next turn is a probe: it asks the primary again
  under the same budget (while it runs, other turns still go to the fallback).  A probe that
  answers closes the breaker; one that fails opens it for another ``reset_s``.

A primary that fails *after* its first text cannot hand over: the listener has heard the start of
its reply.  That reply ends with the primary's :class:`EngineError` (a failed response, as without
a fallback) and counts as a failure of the primary.

Every generation reports which engine answered and why with a
:class:`~voiceagent.backends.protocols.Routed` item before its first piece (reasons:
:data:`ROUTE_REASONS`); ``FallbackLlm.answered`` counts them.  The primary's own reports that
come before its first text (its admission, its end-of-sentence verdict) are passed on as they
come, so a handed-over turn's queue wait includes the primary's attempt.

Cancellation: cancelling or closing the iterator closes whichever engine's generation is open
(the primary's, or the fallback's) and propagates ``CancelledError``; a cancelled turn counts as
neither a success nor a failure.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import replace
from enum import Enum

from voiceagent.backends.protocols import LlmEngine, LlmItem, LlmRequest, LlmStats, Piece, Routed, Usage, is_piece
from voiceagent.errors import EngineError
from voiceagent.tools.spec import Message, Tool

__all__ = ["ROUTE_REASONS", "Breaker", "BreakerState", "FallbackLlm"]

log = logging.getLogger(__name__)

ROUTE_REASONS = ("primary", "probe", "first_token_budget", "primary_failed", "breaker_open")
"""Why an engine answered: the primary as usual or as the half-open probe; the fallback because
the primary missed its first-token budget, failed before its first text, or the breaker is open."""


class BreakerState(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Breaker:
    """The circuit breaker's state machine (no I/O; ``clock`` is injected, seconds)."""

    def __init__(self, failures: int, reset_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if failures < 1 or reset_s < 0:
            raise ValueError("a breaker needs failures >= 1 and reset_s >= 0")
        self.failures = failures
        self.reset_s = reset_s
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._consecutive = 0
        self._opened_at = 0.0
        self._probing = False

    @property
    def state(self) -> BreakerState:
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self.reset_s:
            return BreakerState.HALF_OPEN
        return self._state

    def acquire(self) -> str | None:
        """Which way the next turn goes: ``"primary"``, ``"probe"`` (the half-open trial, one at a
        time) or None (straight to the fallback)."""
        state = self.state
        if state is BreakerState.CLOSED:
            return "primary"
        if state is BreakerState.HALF_OPEN and not self._probing:
            self._probing = True
            return "probe"
        return None

    def release(self, route: str, ok: bool | None) -> None:
        """The outcome of a turn ``acquire`` sent to the primary: True answered, False failed,
        None cancelled before it could tell (a probe slot is given back)."""
        if route == "probe":
            self._probing = False
        if ok is None:
            return
        if ok:
            if self._state is not BreakerState.CLOSED:
                log.warning("LLM circuit breaker closed: the primary engine answered again")
            self._state = BreakerState.CLOSED
            self._consecutive = 0
            return
        self._consecutive += 1
        if route == "probe" or self._consecutive >= self.failures:
            if self._state is BreakerState.CLOSED:
                log.warning("LLM circuit breaker opened after %d failed turns; the fallback answers", self._consecutive)
            self._state = BreakerState.OPEN
            self._opened_at = self._clock()

    def trip(self) -> None:
        """Open now (the primary failed at start-up)."""
        self._consecutive = max(self._consecutive, self.failures)
        self._state = BreakerState.OPEN
        self._opened_at = self._clock()


class FallbackLlm:
    """:class:`~voiceagent.backends.protocols.LlmEngine` that answers from ``fallback`` when
    ``primary`` fails or is slow (rule and cancellation: module docstring)."""

    def __init__(
        self,
        primary: LlmEngine,
        fallback: LlmEngine,
        first_token_budget_s: float,
        failures: int = 3,
        reset_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.name = primary.name
        # A turn may be answered by either engine: its prompt must fit both.
        windows = [w for w in (primary.window, fallback.window) if w is not None]
        self.window = min(windows) if windows else None
        self.first_token_budget_s = first_token_budget_s
        self.breaker = Breaker(failures, reset_s, clock)
        self.answered: collections.Counter[tuple[str, str]] = collections.Counter()

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        """Stream the reply from the primary or the fallback (rule: module docstring)."""
        route = self.breaker.acquire()
        reason = "breaker_open"
        if route is not None:
            outcome: bool | None = None
            pieces = self.primary.generate(request)
            try:
                first: Piece | None = None
                usage: Usage | None = None  # an empty reply's, held: the route goes before it
                deadline = asyncio.get_running_loop().time() + self.first_token_budget_s
                try:
                    while first is None:
                        # The budget covers the wait for text only, never the reader's time.
                        async with asyncio.timeout_at(deadline):
                            item = await anext(pieces)
                        if is_piece(item):
                            first = item
                        elif isinstance(item, Usage):
                            usage = item
                        else:
                            yield item
                except StopAsyncIteration:  # an empty reply is still an answer
                    outcome = True
                    yield self._route(self.primary.name, route)
                    if usage is not None:
                        yield usage
                    return
                except TimeoutError:
                    outcome, reason = False, "first_token_budget"
                    log.warning("LLM %s sent no text within %g s; the fallback answers", self.primary.name, self.first_token_budget_s)
                except Exception as exc:  # any engine failure before the first text is handed over
                    outcome, reason = False, "primary_failed"
                    log.warning("LLM %s failed (%s: %s); the fallback answers", self.primary.name, type(exc).__name__, exc)
                else:
                    outcome = True
                    yield self._route(self.primary.name, route)
                    yield first
                    try:
                        async for piece in pieces:
                            yield piece
                    except Exception:
                        outcome = False  # mid-reply: cannot hand over (module docstring)
                        raise
                    return
            finally:
                self.breaker.release(route, outcome)
                await pieces.aclose()
        yield self._route(self.fallback.name, reason)
        async with contextlib.aclosing(self.fallback.generate(request)) as fallback_pieces:
            async for piece in fallback_pieces:
                yield piece

    def _route(self, engine: str, reason: str) -> Routed:
        self.answered[(engine, reason)] += 1
        return Routed(engine, reason)

    async def prefill(self, key: str, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int:
        """The primary's, while its breaker lets requests through (the fallback answers only when
        the primary cannot; its prefix is not worth the CPU)."""
        if self.breaker.state is not BreakerState.CLOSED:
            return 0
        return await self.primary.prefill(key, messages, tools)

    def prime(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> None:
        """Prime both engines (blocking).  A primary that cannot be reached at start-up opens the
        breaker, so the server starts on the fallback and probes the primary later."""
        self.fallback.prime(messages, tools)
        try:
            self.primary.prime(messages, tools)
        except EngineError as exc:
            log.warning("LLM %s is not answering at start-up (%s); the fallback answers until it does", self.primary.name, exc)
            self.breaker.trip()

    async def count_tokens(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int | None:
        """The primary's count where it can tell, else the fallback's."""
        n = await self.primary.count_tokens(messages, tools)
        return n if n is not None else await self.fallback.count_tokens(messages, tools)

    def stats(self) -> LlmStats:
        st = self.primary.stats()
        return replace(st, breaker=self.breaker.state.value)

    async def aclose(self) -> None:
        try:
            await self.primary.aclose()
        finally:
            await self.fallback.aclose()

    def close(self) -> None:
        try:
            self.primary.close()
        finally:
            self.fallback.close()
