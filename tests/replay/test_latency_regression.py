"""A light variant of the latency benchmark: a few turns replayed through the real server.

Not a speed target (those live in the benchmark, which reports p50/p95 as JSON): it checks what
holds at any speed while each stage streams its first output onwards: every turn answered, no
reply begun while the user was still speaking, and audio leaving before the reply is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.profile import profile_config
from voiceagent.replay import replay_file, summarize
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models


def test_few_turns_are_answered_and_stream(engines: Any, speech: dict[str, Path], run: Any) -> None:
    config = profile_config({"server.port": "0", "llm.instructions": "Answer in two short sentences."})

    async def scenario() -> list[Any]:
        async with VoiceAgentServer(config, engines) as server:
            turns = []
            for name in ("weather", "pause_mid", "count"):
                turns.extend(await replay_file(server.url, speech[name]))
            return turns

    turns = run(scenario(), 180)
    summary = summarize(turns)
    assert summary["answered"] == len(turns) == 3, turns
    assert summary["p50_ms"] <= summary["p95_ms"], summary
    assert sum(t.cutoffs for t in turns) == 0, "the agent spoke while the user was still speaking"
    for t in turns:
        s = t.spans_ms
        # Clause streaming: the first clause is spoken before the LLM has finished the reply (a
        # pipeline that waits for whole replies cannot pass this at any speed).
        if "llm_done" in s and t.reply.count(".") + t.reply.count(",") >= 2:
            assert s["first_clause"] < s["llm_done"], (t.reply, s)
            assert s["first_audio_sent"] >= s["first_clause"], s
