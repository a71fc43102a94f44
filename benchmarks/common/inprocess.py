"""The real server in this process on the benchmark fixtures, file by file, as
latency.py and against_pipecat.py run it: the quick subset of the fixtures, and the reset
that gives each run the state of a fresh server."""

from __future__ import annotations

import asyncio

from voiceagent.backends.registry import Engines
from voiceagent.config import Config
from voiceagent.tools.spec import Message

__all__ = ["QUICK", "reset_engines"]

QUICK = ("capital", "pause_mid", "two_turns", "piper_egg")
"""The fixtures (of ``scripts/make_fixtures.py``) a ``--quick`` run plays."""


async def reset_engines(engines: Engines, config: Config, every: list[Engines]) -> None:
    """Wait for every model executor (of ``every`` model set) to finish its queue, then give the
    LLM of ``engines`` the KV state of a fresh server (the system prompt alone).  Without this, a
    run that follows another on the same file would find that conversation's user turns still in
    llama.cpp's KV cache: a head start."""
    for eng in every:
        for backend in (eng.vad, eng.stt, eng.turn, eng.tts):
            if backend is not None:
                await asyncio.wrap_future(backend.executor.submit(lambda: None))
        await eng.llm.aclose()  # every LLM lease back
    await asyncio.to_thread(engines.llm.prime, [Message("system", config.llm.instructions), Message("user", "Hello.")])
