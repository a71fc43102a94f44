"""Per-turn routing between two LLMs: a small one for social turns, the large one for the rest.

``llm.route = "rules"`` puts a :class:`RoutedLlm` in front of the configured engine (the *large*
route) and an embedded ``llm.route_model`` (the *small* route).  Before a generation starts, the
last message decides: a user message that :func:`voiceagent.text.turn_kind.small_talk_kind` calls
social glue (a greeting, thanks, a farewell, a yes/no, a name) goes to the small route; anything
else — a fact, a sum, a reminder, a tool's output, a response forced to call a tool, a second
user message in a row, a "yes" where tools are offered (it may be agreeing to a call) — to the
large.

Each route is its own circuit breaker (:class:`~voiceagent.backends.fallback.FallbackLlm`): the
large route falls back to the configured fallback engine, or else to the small model; the small
route falls back to the large model.  So a broken or slow engine on either side hands its turn
to the other, and the breakers open independently.

The decision reaches the turn log and ``voiceagent_llm_answers_total`` through the route's
:class:`~voiceagent.backends.protocols.Routed` items: the reason becomes ``DECISION.REASON``, where DECISION is ``large`` or
``small:KIND`` and REASON the breaker's (:data:`~voiceagent.backends.fallback.ROUTE_REASONS`):
``small:thanks.primary`` is a thank-you the small model answered.

Prefill follows the same rule on the partial transcript, so each turn warms the engine that is
likely to answer it.  Priming and closing cover each distinct engine once (the small model may
also be the large route's fallback: one engine, one set of contexts).  ``stats`` (and so the
breaker gauge) is the large route's.

Cancellation: as the route's :class:`FallbackLlm` (closing the iterator closes the open
generation; ``CancelledError`` propagates).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Sequence

from voiceagent.backends.protocols import LlmEngine, LlmItem, LlmRequest, LlmStats, Routed
from voiceagent.tools.spec import Message, Tool

__all__ = ["RoutedLlm", "decide"]


def decide(messages: Sequence[Message], tool_choice: str, classify: Callable[[str], str | None], tools: bool = False) -> str | None:
    """The small route's kind for a prompt ending in ``messages``, or None for the large route:
    the last message must be the user's, with text ``classify`` names, after the agent's reply
    (or the system message), and no tool forced; a confirmation only where no ``tools`` are
    offered."""
    if not messages or tool_choice not in ("auto", "none"):
        return None
    last = messages[-1]
    if last.role != "user" or not isinstance(last.content, str):
        return None
    # Two user messages in a row (a reply cancelled before its first word, or several items
    # before one response.create): "Hello?" may be asking the question before it again.
    if len(messages) > 1 and messages[-2].role not in ("assistant", "system"):
        return None
    kind = classify(last.content)
    # "Yes, please" to "Shall I set a timer?" is a tool call to make: the large model's job.
    return None if kind == "confirmation" and tools else kind


class RoutedLlm:
    """:class:`~voiceagent.backends.protocols.LlmEngine` that sends each turn to ``large`` or
    ``small`` by ``classify`` (rule and cancellation: module docstring).  ``engines``: the
    distinct engines under both routes, closed once each; ``prime_also``: those of them the
    large route does not prime itself (the small model when it is not the large's fallback)."""

    def __init__(
        self,
        large: LlmEngine,
        small: LlmEngine,
        classify: Callable[[str], str | None],
        engines: Sequence[LlmEngine],
        prime_also: Sequence[LlmEngine] = (),
    ) -> None:
        self.large = large
        self.small = small
        self.classify = classify
        self.engines = tuple(engines)
        self.prime_also = tuple(prime_also)
        self.name = large.name
        windows = [w for w in (large.window, small.window) if w is not None]
        self.window = min(windows) if windows else None

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        """Stream the reply from the route :func:`decide` picks."""
        kind = decide(request.messages, request.tool_choice, self.classify, bool(request.tools))
        engine, decision = (self.large, "large") if kind is None else (self.small, f"small:{kind}")
        # The decision at once, before the engine's first item: the LLM stage reads it while the
        # reply is thought (an acknowledgement is never said over the quick model's answer).
        yield Routed(engine.name, decision)
        async with contextlib.aclosing(engine.generate(request)) as pieces:
            async for item in pieces:
                yield Routed(item.engine, f"{decision}.{item.reason}") if isinstance(item, Routed) else item

    async def prefill(self, key: str, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int:
        """The prefill of the route the partial transcript points to."""
        small = decide(messages, "auto", self.classify, bool(tools)) is not None
        return await (self.small if small else self.large).prefill(key, messages, tools)

    def prime(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> None:
        """Prime each distinct engine once (blocking).  The large route goes through its breaker,
        which opens when its engine cannot be reached at start-up."""
        self.large.prime(messages, tools)
        for engine in self.prime_also:
            engine.prime(messages, tools)

    async def count_tokens(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int | None:
        """The large route's count (its window is the binding one), else the small's."""
        n = await self.large.count_tokens(messages, tools)
        return n if n is not None else await self.small.count_tokens(messages, tools)

    def stats(self) -> LlmStats:
        return self.large.stats()

    async def aclose(self) -> None:
        """Each engine's, all of them even if one raises (an exit stack: the error is raised after)."""
        async with contextlib.AsyncExitStack() as stack:
            for engine in self.engines:
                stack.push_async_callback(engine.aclose)

    def close(self) -> None:
        """Each engine's, all of them even if one raises (an exit stack: the error is raised after)."""
        with contextlib.ExitStack() as stack:
            for engine in self.engines:
                stack.callback(engine.close)
