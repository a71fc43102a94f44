"""The semantic cache in a session (fakes for the models; the cache's own store and guards are
real, its embedding is a stand-in: the same words give the same unit vector).

The real embedding model and the real server: tests/integration/test_semantic_cache.py.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncGenerator, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from voiceagent.backends.protocols import LlmItem, LlmRequest, Routed
from voiceagent.cache.semantic import SemanticCache
from voiceagent.cache.store import ReplyStore
from voiceagent.errors import ProtocolError
from voiceagent.events import AudioDelta, ResponseDone
from voiceagent.pipeline.scheduler import PriorityExecutor
from voiceagent.tools.spec import Tool, ToolCall

from .fakes import FakeEngines, FakeLlm, FakeStt, FakeTurn
from .test_session import MakeFakes, Run, barge_in_fakes, barge_in_scenario, make_config, running, say_turn, tokens


def embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    rows = []
    for text in texts:
        seed = int.from_bytes(hashlib.sha256(" ".join(text.lower().split()).encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(16).astype(np.float32)
        rows.append(v / np.linalg.norm(v))
    return np.stack(rows)


@pytest.fixture
def make_fakes() -> Iterator[MakeFakes]:
    made: list[FakeEngines] = []

    def make(**kwargs: object) -> FakeEngines:
        made.append(FakeEngines(**kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for fakes in made:
        fakes.close()


@pytest.fixture
def cache() -> Iterator[SemanticCache]:
    executor = PriorityExecutor("fake-embed")
    yield SemanticCache(embed, executor, ReplyStore(threshold=0.9, ttl_s=60.0, max_entries=10), max_temperature=0.7)
    executor.shutdown(wait=True)


def with_cache(fakes: FakeEngines, cache: SemanticCache) -> FakeEngines:
    fakes.engines.cache = cache
    return fakes


def test_a_second_conversation_asking_the_same_is_answered_from_the_cache(run: Run, make_fakes: MakeFakes, cache: SemanticCache) -> None:
    reply = "We close at six. See you soon."
    fakes = with_cache(make_fakes(stt=FakeStt(default="when do you close"), llm=FakeLlm([tokens(reply)]), turn=FakeTurn(0.9)), cache)

    async def main() -> None:
        async with running(fakes, make_config(), session_id="sess_a") as (a, log_a):
            await say_turn(a)
            _, done_a = await log_a.wait_type(ResponseDone)
        assert len(cache.store) == 1
        async with running(fakes, make_config(), session_id="sess_b") as (b, log_b):
            await say_turn(b)
            _, done_b = await log_b.wait_type(ResponseDone)
            heard_b = np.concatenate([d.pcm for d in log_b.of_type(AudioDelta)])
        heard_a = np.concatenate([d.pcm for d in log_a.of_type(AudioDelta)])
        assert done_a.text == done_b.text == reply
        assert np.array_equal(heard_a, heard_b)  # the same audio, not synthesized again
        assert len(fakes.llm.calls.items) == 1  # the engine answered once
        assert fakes.tts.calls.items == ["We close at six.", "See you soon."]
        assert b.history.items[-1].text == reply  # the history holds what was said
        assert cache.lookups == {"empty": 1, "hit": 1}

    run(main(), 20)


def test_a_later_question_of_a_conversation_is_neither_looked_up_nor_stored(run: Run, make_fakes: MakeFakes, cache: SemanticCache) -> None:
    llm = FakeLlm(default=tokens("At six."))
    fakes = with_cache(make_fakes(stt=FakeStt(default="when do you close"), llm=llm, turn=FakeTurn(0.9)), cache)

    async def main() -> None:
        async with running(fakes, make_config(), session_id="sess_a") as (a, log_a):
            await say_turn(a)
            i, _ = await log_a.wait_type(ResponseDone)
            await say_turn(a)
            await log_a.wait_type(ResponseDone, after=i + 1)
        assert len(fakes.llm.calls.items) == 2  # the second answer came from the engine
        assert sum(cache.lookups.values()) == 1 and len(cache.store) == 1

    run(main(), 20)


def test_a_reply_that_called_a_tool_is_not_stored(run: Run, make_fakes: MakeFakes, cache: SemanticCache) -> None:
    call = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
    fakes = with_cache(make_fakes(stt=FakeStt(default="weather in paris"), llm=FakeLlm([[call]]), turn=FakeTurn(0.9)), cache)

    async def main() -> None:
        async with running(fakes, make_config(), session_id="sess_a") as (a, log_a):
            a.update(tools=(Tool("get_weather", "The weather in a city.", {"type": "object", "properties": {"city": {"type": "string"}}}),))
            await say_turn(a)
            _, done = await log_a.wait_type(ResponseDone)
            assert [c.name for c in done.calls] == ["get_weather"]
        assert len(cache.store) == 0

    run(main(), 20)


def test_a_reply_cut_by_a_barge_in_is_not_stored(run: Run, make_fakes: MakeFakes, cache: SemanticCache) -> None:
    # The first reply is cut after 750 ms of playback (its synthesis had finished long before).
    fakes = with_cache(barge_in_fakes(make_fakes), cache)
    r = run(barge_in_scenario(fakes), 20)
    assert r.cancelled.status.value == "cancelled"
    assert cache.lookups == {"empty": 1}  # the first question only; "stop please" is not a first question
    assert len(cache.store) == 0


def test_a_failing_lookup_is_a_miss_and_the_engine_answers(run: Run, make_fakes: MakeFakes, cache: SemanticCache) -> None:
    cache.executor.shutdown(wait=True)  # every embedding now raises RuntimeError
    fakes = with_cache(make_fakes(stt=FakeStt(default="when do you close"), llm=FakeLlm([tokens("At six.")]), turn=FakeTurn(0.9)), cache)

    async def main() -> None:
        async with running(fakes, make_config(), session_id="sess_a") as (a, log_a):
            await say_turn(a)
            _, done = await log_a.wait_type(ResponseDone)
            assert done.status.value == "completed" and done.text == "At six."

    run(main(), 20)


def test_a_session_that_turns_the_cache_off_neither_reads_nor_fills_it(run: Run, make_fakes: MakeFakes, cache: SemanticCache) -> None:
    llm = FakeLlm(default=tokens("We close at six."))
    fakes = with_cache(make_fakes(stt=FakeStt(default="when do you close"), llm=llm, turn=FakeTurn(0.9)), cache)
    refused: list[float | None] = []

    async def main() -> None:
        async with running(fakes, make_config(), session_id="sess_off") as (a, log_a):
            assert a.settings.semantic_cache  # on by default where the server has a cache
            a.update(semantic_cache=False)
            await say_turn(a)
            await log_a.wait_type(ResponseDone)
            refused.append(a.metrics.registry.get_sample_value("voiceagent_cache_lookups_total", {"result": "session_off"}))
        assert len(cache.store) == 0 and sum(cache.lookups.values()) == 0
        async with running(fakes, make_config(), session_id="sess_on") as (b, log_b):
            await say_turn(b)
            await log_b.wait_type(ResponseDone)
        assert len(cache.store) == 1  # the same question, from a session that keeps it on
        async with running(fakes, make_config(), session_id="sess_off_again") as (c, log_c):
            c.update(semantic_cache=False)
            await say_turn(c)
            await log_c.wait_type(ResponseDone)
        assert cache.lookups == {"empty": 1}  # no hit for the session that turned it off
        assert len(fakes.llm.calls.items) == 3

    run(main(), 20)
    assert refused == [1.0]


def test_a_session_cannot_turn_on_a_cache_the_server_does_not_have(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(default="when do you close"), llm=FakeLlm(default=tokens("At six.")), turn=FakeTurn(0.9))

    async def main() -> None:
        async with running(fakes, make_config(), session_id="sess_a") as (a, _log):
            assert not a.settings.semantic_cache
            with pytest.raises(ProtocolError) as err:
                await a.check_update(semantic_cache=True)
            assert (err.value.code, err.value.param) == ("unsupported_value", "session.voiceagent.semantic_cache")
            await a.check_update(semantic_cache=False)  # off is what it already is: fine

    run(main(), 20)


class Reporting:
    """The session's engine, telling each request the route a router would (a :class:`Routed`
    item before the first piece)."""

    def __init__(self, inner: Any, reason: str) -> None:
        self.inner, self.reason = inner, reason

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        yield Routed("big", self.reason)
        async with contextlib.aclosing(self.inner.generate(request)) as pieces:
            async for piece in pieces:
                yield piece


@pytest.mark.parametrize(
    ("reason", "stored"),
    [("primary", 1), ("large.primary", 1), ("small:greeting.primary", 1), ("large.first_token_budget", 0), ("breaker_open", 0)],
)
def test_a_reply_is_stored_only_when_the_engine_meant_to_answer_did(
    run: Run, make_fakes: MakeFakes, cache: SemanticCache, reason: str, stored: int
) -> None:
    fakes = with_cache(make_fakes(stt=FakeStt(default="hello there"), llm=FakeLlm(default=tokens("Hi!")), turn=FakeTurn(0.9)), cache)
    fakes.engines.llm = Reporting(fakes.engines.llm, reason)

    async def main() -> None:
        async with running(fakes, make_config(), session_id="sess_a") as (a, log_a):
            await say_turn(a)
            _, done = await log_a.wait_type(ResponseDone)
            assert done.status.value == "completed"

    run(main(), 20)
    assert len(cache.store) == stored
