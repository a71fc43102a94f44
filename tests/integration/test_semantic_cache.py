"""The semantic cache with the real embedding model: all-MiniLM-L6-v2 as the catalog ships it, run
by voiceagent.backends.minilm, against sentence-transformers' own output; near-miss questions
against the shipped threshold; and two conversations through the real server, where the second
asks what the first asked."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect

from tests.integration.rt_client import recording, scrape, send_paced, wire_audio
from tests.profile import profile_config
from voiceagent.backends.minilm import MiniLm
from voiceagent.cache.semantic import SemanticCache
from voiceagent.cache.store import ReplyStore
from voiceagent.config import CacheConfig
from voiceagent.models.source import resolve
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models

REFERENCE = Path(__file__).resolve().parent.parent / "data" / "minilm_reference.json"

NEAR_MISSES = [
    ("What is the capital of Austria?", "What is the capital of Australia?"),
    ("Set a timer for ten minutes.", "Set a timer for two minutes."),
    ("Is the museum open on Mondays?", "Is the museum closed on Mondays?"),
    ("When does the first train leave?", "When does the last train leave?"),
    ("Is parking free?", "Is parking not free?"),
    ("Can I bring my dog?", "Can I bring my cat?"),
    ("What time does the museum open?", "What time does the museum open on Sundays?"),
    ("Where is the meeting?", "When is the meeting?"),
    ("Can I call you later?", "Can you call me later?"),
]
PARAPHRASES = [
    ("When do you close?", "What time do you close today?"),
    ("Where is the meeting?", "Where does the meeting take place?"),
    ("How long is the train from London to Paris?", "How long does the train from London to Paris take?"),
    ("Thank you.", "Thanks a lot."),
]


@pytest.fixture(scope="module")
def model() -> MiniLm:
    return MiniLm(resolve("embed", CacheConfig().embed_model).path)


def test_embeddings_match_sentence_transformers(model: MiniLm) -> None:
    ref = json.loads(REFERENCE.read_text())
    ours = model.embed(ref["sentences"])
    theirs = np.array(ref["embeddings"], dtype=np.float32)
    cosines = (ours * theirs).sum(1) / np.linalg.norm(theirs, axis=1)
    assert cosines.min() > 0.99999, dict(zip(ref["sentences"], cosines.round(6).tolist(), strict=True))
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_one_at_a_time_is_the_same_as_a_batch(model: MiniLm) -> None:
    texts = ["Hello.", "How long does the train from London to Paris take?"]
    batch = model.embed(texts)
    single = np.stack([model.embed([t])[0] for t in texts])
    assert np.abs(batch - single).max() < 1e-5


def test_near_misses_never_hit_at_the_shipped_threshold_and_paraphrases_do(model: MiniLm) -> None:
    store = ReplyStore(threshold=CacheConfig().threshold, ttl_s=60.0, max_entries=100)
    for i, (a, _) in enumerate(NEAR_MISSES + PARAPHRASES):
        store.add("scope", a, model.embed([a])[0], f"reply {i}")
    for _, b in NEAR_MISSES:
        found = store.lookup("scope", b, model.embed([b])[0])
        assert found.entry is None, f"{b!r} hit {found.entry.question!r} at {found.similarity:.3f}"
    hits = [store.lookup("scope", b, model.embed([b])[0]) for _, b in PARAPHRASES]
    assert [h.entry.question if h.entry else None for h in hits] == [a for a, _ in PARAPHRASES]


def test_a_second_conversation_asking_the_same_is_answered_from_the_cache_by_the_server(
    engines: Any, model: MiniLm, speech: dict[str, Path], run: Any
) -> None:
    cfg = CacheConfig()
    cache = SemanticCache(model.embed, model.executor, ReplyStore(cfg.threshold, 600.0, 100), cfg.max_temperature)
    with_cache = dataclasses.replace(engines, cache=cache)
    config = profile_config({"server.port": "0", "server.max_sessions": "2"})

    async def conversation(url: str) -> tuple[str, str, bytes]:
        async with connect(url, max_size=None) as ws:
            rec, pump = await recording(ws)
            await send_paced(ws, wire_audio(speech["weather"], tail_s=1.0))
            done = await rec.wait_for("response.done", 60)
            assert done["response"]["status"] == "completed", done
            heard = (await rec.wait_for("conversation.item.input_audio_transcription.completed", 10))["transcript"]
            audio = b"".join(base64.b64decode(e["delta"]) for e in rec.of("response.output_audio.delta"))
            await ws.close()
            await pump
            return heard, rec.done(done).text, audio

    async def without_the_cache(port: int) -> tuple[bool, str]:
        """The official SDK's client turns the cache off for its session (the vendor field goes
        through the SDK as it is) and asks the same: the engine answers."""
        from openai import AsyncOpenAI

        client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{port}/v1")
        async with client.realtime.connect(model="voiceagent") as conn:
            session: Any = {"type": "realtime", "voiceagent": {"semantic_cache": False}}  # a field the SDK's types lack
            await conn.session.update(session=session)
            echoed = None
            async for event in conn:
                if event.type == "session.updated":
                    echoed = (event.session.model_extra or {}).get("voiceagent")
                    break
            assert echoed == {"semantic_cache": False}, echoed
            pcm = wire_audio(speech["weather"], tail_s=1.0)
            for i in range(0, len(pcm), 480):
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i : i + 480].astype("<i2").tobytes()).decode())
                await asyncio.sleep(0.02)  # a microphone's pace
            async for event in conn:
                if event.type == "response.done":
                    return event.response.status == "completed", event.response.id or ""
        return False, ""

    async def main() -> tuple[list[tuple[str, str, bytes]], tuple[bool, str], dict[str, float]]:
        async with VoiceAgentServer(config, with_cache) as server:
            first = await conversation(server.url)
            off = await without_the_cache(server.port)
            second = await conversation(server.url)
            return [first, second], off, await asyncio.to_thread(scrape, server.port)

    (first, second), off, metrics = run(main(), 240)
    assert off[0], "the session without the cache was answered"
    assert metrics['voiceagent_cache_lookups_total{result="session_off"}'] == 1
    assert first[0] == second[0], "the same recording, transcribed the same"
    assert first[1] == second[1] and first[1].strip()
    a, b = np.frombuffer(first[2], dtype="<i2"), np.frombuffer(second[2], dtype="<i2")
    # The stored audio, resampled to the wire rate in other chunks: the same to a few steps.
    assert len(a) > 0 and abs(len(a) - len(b)) <= 2, (len(a), len(b))
    n = min(len(a), len(b))
    assert np.abs(a[:n].astype(np.int32) - b[:n]).max() <= 64, "not the stored audio"
    assert metrics['voiceagent_cache_lookups_total{result="hit"}'] == 1
    assert metrics['voiceagent_llm_answers_total{engine="cache",reason="hit"}'] == 1
    assert len(cache.store) == 1
