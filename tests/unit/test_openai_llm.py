"""The openai backend's contract at its HTTP seam (httpx.MockTransport): parsing, errors, deadlines.
The real-server behaviour (streaming, cancellation, a killed server) is in tests/integration."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from voiceagent.backends.openai_llm import OpenAiLlm, parse_sse_delta
from voiceagent.backends.protocols import Admitted, LlmItem, LlmRequest, Usage
from voiceagent.errors import EngineError
from voiceagent.tools.spec import Message

Run = Callable[..., Any]


def chunk(text: str) -> bytes:
    return f"data: {json.dumps({'choices': [{'delta': {'content': text}}]})}\n\n".encode()


class Body(httpx.AsyncByteStream):
    def __init__(self, parts: list[bytes], stall: asyncio.Event | None = None) -> None:
        self.parts = parts
        self.stall = stall
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            yield part
        if self.stall is not None:
            await self.stall.wait()

    async def aclose(self) -> None:
        self.closed = True


def engine(handler: Callable[[httpx.Request], httpx.Response], **kw: Any) -> OpenAiLlm:
    return OpenAiLlm("http://llm.test/v1", "m", api_key="k", transport=httpx.MockTransport(handler), **kw)


async def collect(llm: OpenAiLlm, items: list[LlmItem] | None = None) -> list[str]:
    """The reply's pieces; every item of the stream is appended to ``items``."""
    req = LlmRequest("s", [Message("user", "hi")], 8, 0.0)
    got: list[LlmItem] = [] if items is None else items
    try:
        async with contextlib.aclosing(llm.generate(req)) as gen:
            async for item in gen:
                got.append(item)
    finally:
        await llm.aclose()
    return [p for p in got if isinstance(p, str)]


def test_sse_lines() -> None:
    assert parse_sse_delta(chunk("Hi").decode().strip()) == ("Hi", [])
    assert parse_sse_delta("data: [DONE]") is None
    assert parse_sse_delta(": keep-alive") == ("", [])
    assert parse_sse_delta("") == ("", [])
    assert parse_sse_delta('data: {"choices": []}') == ("", [])
    with pytest.raises(EngineError, match="malformed"):
        parse_sse_delta("data: {not json")
    with pytest.raises(EngineError, match="mid-stream"):
        parse_sse_delta('data: {"error": {"message": "out of memory"}}')
    call = 'data: {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f"}}]}}]}'
    assert parse_sse_delta(call) == ("", [{"index": 0, "id": "c1", "function": {"name": "f"}}])


def test_streams_the_deltas_and_sends_the_request_openai_style(run: Run) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, stream=Body([chunk("Hello"), chunk(" there"), b"data: [DONE]\n\n"]))

    items: list[LlmItem] = []
    assert run(collect(engine(handler), items), 5) == ["Hello", " there"]
    # Admitted at once (no queue of ours); the usage last: a token per chunk, no prompt count.
    assert items == [Admitted(), "Hello", " there", Usage("m", None, None, 2)]
    body = json.loads(seen[0].content)
    assert seen[0].url == "http://llm.test/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer k"
    assert body["stream"] is True and body["model"] == "m" and body["messages"] == [{"role": "user", "content": "hi"}]


def test_an_http_error_names_the_status_and_the_servers_words(run: Run) -> None:
    llm = engine(lambda _r: httpx.Response(503, text="model is loading"))
    with pytest.raises(EngineError, match="HTTP 503: model is loading"):
        run(collect(llm), 5)


def test_a_stream_that_ends_without_done_is_an_error(run: Run) -> None:
    llm = engine(lambda _r: httpx.Response(200, stream=Body([chunk("Hel")])))
    with pytest.raises(EngineError, match="without"):
        run(collect(llm), 5)


def test_no_first_token_within_the_deadline_fails_the_turn(run: Run) -> None:
    stall = asyncio.Event()  # never set: the server accepted the request and went quiet
    llm = engine(lambda _r: httpx.Response(200, stream=Body([b": still thinking\n\n"], stall)), first_token_timeout_s=0.05)
    with pytest.raises(EngineError, match=r"nothing within 0\.05 s"):
        run(collect(llm), 5)


def test_closing_early_closes_the_response_stream(run: Run) -> None:
    body = Body([chunk("a"), chunk("b"), chunk("c")], asyncio.Event())
    llm = engine(lambda _r: httpx.Response(200, stream=body))

    async def main() -> None:
        async with contextlib.aclosing(llm.generate(LlmRequest("s", [Message("user", "hi")], 8, 0.0))) as gen:
            assert await anext(gen) == Admitted()
            assert await anext(gen) == "a"
        await llm.aclose()

    run(main(), 5)
    assert body.closed


def test_the_deadline_covers_late_headers_and_keep_alives(run: Run) -> None:
    async def late_headers(_request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)  # the server holds its answer back (a queued request)
        return httpx.Response(200, stream=Body([chunk("late")]))

    class KeepAlives(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            while True:  # a comment line every 10 ms, never a token: each line must not reset the deadline
                yield b": ping\n\n"
                await asyncio.sleep(0.01)

    for handler in (late_headers, lambda _r: httpx.Response(200, stream=KeepAlives())):
        llm = OpenAiLlm("http://llm.test/v1", "m", transport=httpx.MockTransport(handler), first_token_timeout_s=0.1)
        with pytest.raises(EngineError, match=r"nothing within 0\.1 s"):
            run(collect(llm), 5)
