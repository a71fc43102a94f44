"""Reading an LLM engine's stream in tests: its text and the routes it reported."""

from __future__ import annotations

import contextlib
from typing import Any

from voiceagent.backends.protocols import LlmRequest, Routed

__all__ = ["text_and_routes"]


async def text_and_routes(llm: Any, request: LlmRequest, keep: int | None = None) -> tuple[str, list[tuple[str, str]]]:
    """The reply's text and each :class:`Routed` item's ``(engine, reason)``, in order.  ``keep``:
    stop (closing the stream) after that many text pieces."""
    text: list[str] = []
    routes: list[tuple[str, str]] = []
    async with contextlib.aclosing(llm.generate(request)) as items:
        async for item in items:
            if isinstance(item, Routed):
                routes.append((item.engine, item.reason))
            elif isinstance(item, str):
                text.append(item)
                if keep is not None and len(text) >= keep:
                    break
    return "".join(text), routes
