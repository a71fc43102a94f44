"""An LLM behind any OpenAI-compatible server: streams ``POST {base_url}/chat/completions``.

Servers this works with: ``llama-server``, ``python -m llama_cpp.server``, ``vllm serve``, and
hosted APIs.  The server owns the sequence state (its slots, prefix cache and batching); every
request carries the whole conversation, and the server reuses the cached prefix.

* One pooled keep-alive HTTP client per process and event loop (``httpx.AsyncClient``).
* A first-token deadline (``first_token_timeout_s``): a server that accepts the request but does
  not start answering in time fails the turn with a clear :class:`EngineError`.
* Errors: unreachable, an HTTP error status (its body quoted), a stream that breaks off, or a
  malformed event each raise :class:`EngineError` naming the server.  The session survives.

Cancellation: closing or cancelling the iterator closes the HTTP response; the connection is
dropped rather than drained, which is how the server learns to abort the generation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from voiceagent.backends.protocols import Admitted, LlmItem, LlmRequest, LlmStats, Usage
from voiceagent.config import LlmConfig
from voiceagent.errors import EngineError
from voiceagent.tools.format import HermesToolParser, chat_messages, new_call_id, tool_dicts
from voiceagent.tools.spec import Message, Tool, ToolCall

__all__ = ["OpenAiLlm", "load", "parse_sse_delta"]


@dataclass
class _CallPieces:
    """One streamed tool call, put together from its deltas (OpenAI sends the id and name once,
    then the arguments in pieces, all under one ``index``)."""

    call_id: str = ""
    name: str = ""
    arguments: str = ""


def parse_sse_delta(line: str) -> tuple[str, list[dict[str, Any]]] | None:
    """(text, tool-call deltas) in one ``data:`` line of a chat-completions stream; ("", []) for
    a line without either, None at the end.

    Raises :class:`EngineError` for a line that is not the protocol's JSON.
    """
    if not line.startswith("data:"):
        return "", []  # comments, event names, keep-alives, blank separators
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    try:
        obj = json.loads(data)
        if "error" in obj:
            raise EngineError(f"the LLM server reported an error mid-stream: {obj['error']}")
        choices = obj.get("choices") or []
        if not choices:
            return "", []  # usage-only chunks
        delta = choices[0].get("delta") or {}
        content = delta.get("content")
        calls = delta.get("tool_calls") or []
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            raise TypeError("tool_calls is not a list of objects")
        return (content if isinstance(content, str) else ""), calls
    except (ValueError, AttributeError, TypeError) as exc:
        raise EngineError(f"the LLM server sent a malformed stream event: {data[:120]!r}") from exc


def _add_call_delta(calls: dict[int, _CallPieces], delta: dict[str, Any]) -> None:
    index = delta.get("index", 0)
    call = calls.setdefault(index if isinstance(index, int) else 0, _CallPieces())
    if isinstance(delta.get("id"), str):
        call.call_id = delta["id"]
    fn = delta.get("function") or {}
    if isinstance(fn, dict):
        if isinstance(fn.get("name"), str):
            call.name += fn["name"]
        if isinstance(fn.get("arguments"), str):
            call.arguments += fn["arguments"]


class OpenAiLlm:
    """:class:`~voiceagent.backends.protocols.LlmEngine` for an OpenAI-compatible HTTP server."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        first_token_timeout_s: float = 5.0,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
        window: int | None = None,
    ) -> None:
        """``transport``: an httpx transport to use instead of the network (a test seam);
        ``window``: the server's context length as configured (``llm.context``)."""
        self.name = "openai"
        self.window = window
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.first_token_timeout_s = first_token_timeout_s
        self._limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._transport = transport
        self._active = 0
        self._generated = 0

    def _client(self) -> httpx.AsyncClient:
        # One pool per event loop: an httpx client's connections belong to the loop that made them.
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            for old in [lp for lp in self._clients if lp.is_closed()]:
                del self._clients[old]
            client = httpx.AsyncClient(
                limits=self._limits, timeout=httpx.Timeout(30.0, connect=5.0), headers=self._headers, transport=self._transport
            )
            self._clients[loop] = client
        return client

    def _body(
        self, messages: Sequence[Message], max_tokens: int, temperature: float, tools: Sequence[Tool] = (), tool_choice: str = "auto"
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(messages, arguments_as_text=True),
            "stream": True,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if tools:
            body["tools"] = tool_dicts(tools)
            body["tool_choice"] = (
                tool_choice if tool_choice in ("auto", "none", "required") else {"type": "function", "function": {"name": tool_choice}}
            )
        return body

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        """Stream the reply (contract: module docstring).  Tool calls come from the server's own
        ``tool_calls`` deltas; a server that leaves the model's ``<tool_call>`` text in the content
        (no tool parser configured) is read with the Hermes format as well."""
        url = f"{self.base_url}/chat/completions"
        body = self._body(request.messages, request.max_tokens, request.temperature, request.tools, request.tool_choice)
        parser = HermesToolParser(names=[t.name for t in request.tools]) if request.tools and request.tool_choice != "none" else None
        calls: dict[int, _CallPieces] = {}
        generated = 0
        self._active += 1
        try:
            yield Admitted()
            try:
                # One deadline from sending the request to the first piece of text: it covers a
                # server that holds its headers back as well as one that sends keep-alives only.
                async with asyncio.timeout(self.first_token_timeout_s) as deadline:
                    async with self._client().stream("POST", url, json=body) as resp:
                        if resp.status_code != 200:
                            text = (await resp.aread()).decode("utf-8", "replace").strip()
                            raise EngineError(f"the LLM server at {self.base_url} answered HTTP {resp.status_code}: {text[:200]}")
                        async for line in resp.aiter_lines():
                            parsed = parse_sse_delta(line)
                            if parsed is None:
                                for out in parser.flush() if parser is not None else []:
                                    yield out
                                for call in calls.values():
                                    yield ToolCall(call.call_id or new_call_id(), call.name, call.arguments)
                                # Servers send one token per chunk; the prompt is not reported.
                                yield Usage(self.model, None, None, generated)
                                return
                            piece, deltas = parsed
                            for delta in deltas:
                                _add_call_delta(calls, delta)
                            if piece or deltas:
                                deadline.reschedule(None)
                                self._generated += 1
                                generated += 1
                            if piece:
                                for out in parser.push(piece) if parser is not None else [piece]:
                                    yield out
                        raise EngineError(f"the LLM server at {self.base_url} ended the stream without [DONE]")
            except TimeoutError:
                raise EngineError(f"the LLM server at {self.base_url} sent nothing within {self.first_token_timeout_s:g} s") from None
            except httpx.HTTPError as exc:
                raise EngineError(f"the LLM server at {self.base_url} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self._active -= 1

    async def prefill(self, key: str, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int:
        """Nothing: the engine's own prefix cache holds only what a request has sent (see the
        protocol); prefilling would cost a request per partial transcript."""
        return 0

    def prime(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> None:
        """One short blocking request, so the server caches the system prompt's prefix."""
        body = self._body(messages, 1, 0.0, tools) | {"stream": False}
        try:
            resp = httpx.post(f"{self.base_url}/chat/completions", json=body, headers=self._headers, timeout=60.0)
        except httpx.HTTPError as exc:
            raise EngineError(f"the LLM server at {self.base_url} is unreachable: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise EngineError(f"the LLM server at {self.base_url} answered HTTP {resp.status_code}: {resp.text[:200]}")

    async def count_tokens(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int | None:
        """None: the server's tokenizer is not known here (the session estimates)."""
        return None

    def stats(self) -> LlmStats:
        return LlmStats(engine=self.name, slots=0, busy=self._active, waiting=0, generated_tokens=self._generated)

    async def aclose(self) -> None:
        """Close the running loop's pooled client (its keep-alive connections)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def close(self) -> None:
        """Forget every pooled client.  Close each from its own loop first (:meth:`aclose`):
        an httpx client cannot be closed from another loop."""
        self._clients.clear()


def load(config: LlmConfig, cache_dir: Path) -> OpenAiLlm:
    """The engine for ``llm.backend = "openai"`` (no I/O: the first request connects)."""
    return OpenAiLlm(config.base_url, config.model, config.api_key, config.first_token_timeout_s, window=config.context)
