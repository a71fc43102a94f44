"""The vLLM backend's own logic against a stand-in for ``AsyncLLM`` (the real engine's tests are in
tests/integration/test_vllm_backend.py): abort on close, finish reasons, errors, many loops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from voiceagent.backends.protocols import Admitted, LlmItem, LlmRequest, Usage
from voiceagent.backends.vllm_llm import VllmLlm
from voiceagent.errors import EngineError
from voiceagent.tools.spec import Message, Tool


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str | None = None


@dataclass
class Output:
    outputs: list[Completion]
    finished: bool
    num_cached_tokens: int = 0


@dataclass
class FakeAsyncLlm:
    """Streams one word per step; ``abort`` ends a request with finish_reason "abort" as vLLM does."""

    words: int = 50
    fail: bool = False
    queues: dict[str, asyncio.Queue[Output]] = field(default_factory=dict)
    aborted: list[str] = field(default_factory=list)
    prompts: list[list[int]] = field(default_factory=list)
    loops: set[int] = field(default_factory=set)
    shut: bool = False

    async def generate(self, prompt: Any, sampling_params: Any, request_id: str) -> AsyncGenerator[Output, None]:
        self.loops.add(id(asyncio.get_running_loop()))
        self.prompts.append(prompt["prompt_token_ids"])
        if self.fail:
            raise RuntimeError("engine core died")
        queue: asyncio.Queue[Output] = asyncio.Queue()
        self.queues[request_id] = queue
        producer = asyncio.create_task(self._produce(request_id, queue, sampling_params))
        try:
            while True:
                out = await queue.get()
                yield out
                if out.finished:
                    return
        finally:
            producer.cancel()

    async def _produce(self, rid: str, queue: asyncio.Queue[Output], max_words: int) -> None:
        n = min(self.words, max_words)
        for i in range(n):
            await asyncio.sleep(0.001)
            last = i == n - 1
            queue.put_nowait(Output([Completion(f"w{i} ", [i], "length" if last else None)], last, 7 if i == 0 else 0))

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)
        queue = self.queues.get(request_id)
        if queue is not None:
            queue.put_nowait(Output([Completion("", [], "abort")], True))

    def shutdown(self) -> None:
        self.shut = True


def _llm(fake: FakeAsyncLlm) -> VllmLlm:
    def render(messages: Sequence[Message], tools: Sequence[Tool] = (), prefill: str = "") -> list[int]:
        return [len(m.content) for m in messages]

    return VllmLlm(lambda: fake, render, lambda max_tokens, temperature: max_tokens)


def _request(key: str = "s", max_tokens: int = 10) -> LlmRequest:
    return LlmRequest(key, [Message("system", "Be brief."), Message("user", "Hi")], max_tokens, 0.0)


async def _collect(llm: VllmLlm, request: LlmRequest, stop_after: int | None = None, items: list[LlmItem] | None = None) -> list[str]:
    """The reply's text pieces (``stop_after`` of them at most); every item of the stream is
    appended to ``items``."""
    got: list[str] = []
    async with contextlib.aclosing(llm.generate(request)) as pieces:
        async for piece in pieces:
            if items is not None:
                items.append(piece)
            if not isinstance(piece, str):
                continue
            got.append(piece)
            if stop_after is not None and len(got) >= stop_after:
                break
    return got


def test_a_reply_streams_and_its_finish_reason_and_cache_hits_are_counted() -> None:
    fake = FakeAsyncLlm()
    llm = _llm(fake)
    try:
        items: list[LlmItem] = []
        got = asyncio.run(_collect(llm, _request(max_tokens=3), items=items))
        assert got == ["w0 ", "w1 ", "w2 "]
        # Admitted at once (vLLM queues nothing of ours); the usage last: the prompt, its cache hits, the reply.
        assert items == [Admitted(), *got, Usage("", 2, 7, 3)]
        assert dict(llm.finished) == {"length": 1}
        st = llm.stats()
        assert (st.prompt_tokens, st.reused_tokens, st.generated_tokens) == (2, 7, 3)
        assert fake.aborted == []
    finally:
        llm.close()
    assert fake.shut


def test_closing_early_aborts_the_request_inside_the_engine_and_waits_for_its_word() -> None:
    fake = FakeAsyncLlm()
    llm = _llm(fake)
    try:
        items: list[LlmItem] = []
        got = asyncio.run(_collect(llm, _request(max_tokens=50), stop_after=2, items=items))
        assert len(got) == 2
        assert not any(isinstance(item, Usage) for item in items)  # closed early: no usage
        # By the time the close returned, the engine had been told and had finished it as aborted.
        assert len(fake.aborted) == 1
        assert dict(llm.finished) == {"abort": 1}
        assert llm.stats().busy == 0
    finally:
        llm.close()


def test_cancelling_the_consumer_aborts_too_and_cancellation_propagates() -> None:
    fake = FakeAsyncLlm(words=10_000)
    llm = _llm(fake)

    async def main() -> None:
        started = asyncio.Event()

        async def consume() -> None:
            async with contextlib.aclosing(llm.generate(_request(max_tokens=10_000))) as pieces:
                async for piece in pieces:
                    if isinstance(piece, str):
                        started.set()

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(main())
        assert dict(llm.finished) == {"abort": 1}
    finally:
        llm.close()


def test_an_engine_error_is_an_engine_error_and_the_backend_keeps_working() -> None:
    fake = FakeAsyncLlm(fail=True)
    llm = _llm(fake)
    try:
        with pytest.raises(EngineError, match="engine core died"):
            asyncio.run(_collect(llm, _request()))
        fake.fail = False
        assert asyncio.run(_collect(llm, _request(max_tokens=2))) == ["w0 ", "w1 "]
    finally:
        llm.close()


def test_many_callers_on_different_loops_share_one_engine_loop() -> None:
    fake = FakeAsyncLlm()
    llm = _llm(fake)
    try:

        async def two_at_once() -> list[list[str]]:
            return list(await asyncio.gather(_collect(llm, _request("a", 4)), _collect(llm, _request("b", 5))))

        first = asyncio.run(two_at_once())
        second = asyncio.run(_collect(llm, _request("c", 1)))
        assert [len(r) for r in first] == [4, 5] and second == ["w0 "]
        assert len(fake.loops) == 1  # the engine only ever ran on its own loop
    finally:
        llm.close()
    with pytest.raises(EngineError, match="closed"):
        asyncio.run(_collect(llm, _request()))
