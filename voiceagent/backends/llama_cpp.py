"""The embedded LLM: llama.cpp through llama-cpp-python, GGUF models from packages, paths or the
hub cache (:func:`gguf_path`).

:func:`load` builds an :class:`~voiceagent.backends.llm_pool.LlmPool` of ``llm.contexts``
contexts over one model file.  Each context is a ``Llama`` object: the file is memory-mapped, so
the weights live once in the OS page cache and each context adds only its KV cache (~25 MB at
2k tokens for the 0.5B model) and compute buffers.

One context keeps the KV cache of its last prompt and reuses the longest common prefix of the
next one.  The conversation is rendered deterministically (same system prompt, assistant turns
stored exactly as generated, or cut at a word boundary on barge-in), so a turn on the context
that served the conversation last pays only for its new tokens.

Tools go through the model's own chat template (Qwen2.5's lists them in the system turn and
expects ``<tool_call>`` JSON back, read by :class:`~voiceagent.tools.format.HermesToolParser`).
``tool_choice`` "required" opens the call in the prompt and holds the model to JSON with a
grammar; a named tool holds the arguments to that tool's schema (llama.cpp's own grammar path).
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp import Llama, LogitsProcessorList, llama_set_n_threads
from llama_cpp._utils import suppress_stdout_stderr
from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

from voiceagent.backends.batch_engine import BatchedEngine, sentence_end_probability
from voiceagent.backends.kv_shift import Gap, find_gap
from voiceagent.backends.llama_batch import BatchContext, close_gap
from voiceagent.backends.llama_prefix import SharedPrefixes
from voiceagent.backends.llama_render import SENTENCE_ENDS, ChatRenderer
from voiceagent.backends.llm_pool import LlmPool
from voiceagent.backends.protocols import LlmContext
from voiceagent.config import LlmConfig
from voiceagent.errors import ModelError
from voiceagent.models.source import resolve
from voiceagent.pipeline.scheduler import PriorityExecutor
from voiceagent.text.clauses import unpunctuated
from voiceagent.tools.format import NO_CALL_GBNF, OPEN, HermesToolParser, chat_messages, new_call_id, tool_dicts
from voiceagent.tools.spec import Message, Tool, ToolCall, ToolChoice

__all__ = ["SENTENCE_ENDS", "LlamaCppContext", "converted", "gguf_path", "load"]

log = logging.getLogger(__name__)


_BATCH = 256  # prompt tokens evaluated per llama.cpp batch


_FTYPES = {"iq4_nl": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ4_NL, "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0}


def gguf_path(name: str, cache_dir: Path, quant: str = "shipped") -> Path:
    """The GGUF file ``llm.model = name`` stands for (:mod:`voiceagent.models.source`: a catalog
    model, joined once if split, a path or a hub id), checked to be a GGUF with a chat template.

    A catalog model is converted once to ``quant`` (``llm.quant``) unless that is ``shipped``.
    A model of the user's own runs as given: they chose its quantization, and converting it
    would cost a minute or more and the cache space of a second copy without being asked."""
    source = resolve("llm", name, cache_dir)
    if source.origin != "catalog" or quant == "shipped":
        return source.path
    return converted(source.path, quant, cache_dir)


def converted(source: Path, quant: str, cache_dir: Path) -> Path:
    """``source`` converted to ``quant`` by llama.cpp's quantizer, once: the result is kept in the
    cache (``<cache_dir>/models/<name>.<quant>.gguf``, never beside a file inside an installed
    package) with a stamp naming the source's size and modification time, the
    type and the llama-cpp-python version, and made again when any of them changes.

    Blocking: 51 s for the 0.5B on two cores, longer for a bigger model (``voiceagent models
    prepare`` does it at set-up).  Written to a temporary file first, so an interrupted conversion
    never leaves a truncated model.  No checksum is recorded for the result: it is computed here,
    by the llama.cpp build of this machine, from the verified source.
    """
    if quant not in _FTYPES:
        raise ValueError(f"llm.quant {quant!r}: unknown (choose from shipped, {', '.join(_FTYPES)})")
    target = cache_dir / "models" / f"{source.stem}.{quant}.gguf"
    target.parent.mkdir(parents=True, exist_ok=True)
    stamp = target.with_name(target.name + ".stamp")
    st = source.stat()
    want = f"{st.st_size} {st.st_mtime_ns} {quant} llama-cpp-python {llama_cpp.__version__}"
    if target.is_file() and stamp.is_file() and stamp.read_text().strip() == want:
        return target
    log.info("converting %s to %s once (about a minute for the 0.5B model on two cores)", source.name, quant)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = _FTYPES[quant]
    params.allow_requantize = True  # the source is already quantized (its 8- and 5-bit tensors go to 4 bits)
    params.nthread = os.cpu_count() or 1
    try:
        with suppress_stdout_stderr(disable=False):  # a line per tensor, printed by llama.cpp itself
            failed = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
        if failed:
            # Not a ModelError: the loader adds which model it is and what to do (registry.load_engines).
            raise RuntimeError(f"llama.cpp could not convert {source} to {quant}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    stamp.write_text(want + "\n")
    return target


def _messages(messages: Sequence[Message]) -> Any:
    return chat_messages(messages)


class LlamaCppContext:
    """One llama.cpp context (an :class:`~voiceagent.backends.protocols.LlmContext`)."""

    def __init__(
        self,
        path: Path,
        threads: int,
        context: int,
        call_bias: float = 0.0,
        shared: SharedPrefixes | None = None,
        context_shift: bool = True,
    ) -> None:
        """``shared``: the evaluated prefixes this context shares with the other contexts of its
        model (:mod:`voiceagent.backends.llama_prefix`); None: it shares none.  ``context_shift``:
        a prompt that is the cached one with a run taken out (a conversation cut to fit) moves the
        cells after the run back instead of evaluating them again (:mod:`voiceagent.backends.kv_shift`)."""
        self._shared = shared
        self._llm = Llama(
            model_path=str(path),
            n_ctx=context,
            n_threads=threads,
            n_threads_batch=threads,
            n_batch=_BATCH,
            use_mmap=True,
            # llama-cpp-python leaves it off unless asked (llama.cpp's own default is on, and the
            # batched engine has it).  On, a long prompt evaluates faster, decoding is no slower,
            # and each context keeps less attention scratch resident after its first long prompt,
            # which read as the pool soak's RSS growth (figures in docs/bench/memory/flash_attn_pool.json
            # and docs/reports/soak-2026-11-26.md; the retired bench: git show 5b498f1:scripts/bench_flash_attn.py).
            flash_attn=True,
            verbose=bool(os.environ.get("VOICEAGENT_LLAMA_VERBOSE")),
        )
        trained = int(cast(Any, self._llm)._model.n_ctx_train())
        if trained and context > trained:
            self._llm.close()
            raise ModelError(
                f"llm.context {context} is longer than {path.name} was trained for ({trained} tokens); set llm.context <= {trained}"
            )
        self.context = context
        self._threads = threads
        self._call_bias = call_bias
        self._context_shift = context_shift and bool(llama_cpp.llama_memory_can_shift(cast(Any, self._llm)._ctx.memory))
        self.shifted_tokens = 0
        """Cached tokens brought back by context shifts so far (not evaluated again)."""
        self._render = ChatRenderer(self._llm, str(path))
        self._call_openers = self._render.call_openers
        self._ends = self._render.ends
        self._formatter: Any = self._render.formatter  # renders the prompt exactly as create_chat_completion does
        self._token_text = self._render.token_text
        self._head_tokens = self._render.head_tokens
        self._prompt_tokens = self._render.prompt_tokens

    def close(self) -> None:
        """Free the context and its KV cache (the pool calls it once its executor has stopped)."""
        self._llm.close()

    def set_threads(self, threads: int) -> None:
        if threads != self._threads:
            self._threads = threads
            llama_set_n_threads(cast(Any, self._llm)._ctx.ctx, threads, threads)

    def count_tokens(self, text: str) -> int:
        return self._render.count_tokens(text)

    def prompt_length(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        """The prompt's length in tokens, as :meth:`stream` will render it (thread-safe:
        :class:`~voiceagent.backends.llama_render.ChatRenderer`)."""
        return self._render.prompt_length(messages, tools)

    def prompt_reuse(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> tuple[int, int]:
        """(prompt tokens, tokens of it already in this context's KV cache), as llama.cpp will
        see them; (0, 0) where the model has no chat template to render."""
        if self._formatter is None:
            return 0, 0
        tokens = self._prompt_tokens(messages, tools)
        gap = self._gap(tokens)  # what :meth:`_shift` will bring back counts as reused too
        return len(tokens), gap[0] + gap[2] if gap is not None else self._cached_prefix(tokens)

    def _gap(self, tokens: Sequence[int]) -> Gap | None:
        """The gap a cut left between the cached tokens and ``tokens`` (module kv_shift), or None
        (none, or context shift off)."""
        llm = cast(Any, self._llm)
        start = self._cached_prefix(tokens)
        if not self._context_shift or start >= llm.n_tokens:
            return None
        return find_gap(llm.input_ids[: llm.n_tokens].tolist(), tokens, start)

    def _shift(self, tokens: Sequence[int]) -> None:
        """Close the gap a cut left before ``tokens`` (:meth:`_gap`): the dropped run's cells go,
        the cells after it move back, and the tokens they hold become part of the cached prefix."""
        gap = self._gap(tokens)
        if gap is None:
            return
        llm = cast(Any, self._llm)
        start, removed, kept = gap
        close_gap(llm._ctx.memory, 0, start, removed, kept)
        llm.input_ids[start : start + kept] = llm.input_ids[start + removed : start + removed + kept].copy()
        llm.n_tokens = start + kept
        llm._requires_eval = True  # no live logits: at least the last token is evaluated again
        self.shifted_tokens += kept

    def _adopt(self, tokens: Sequence[int]) -> None:
        """Take the longest shared prefix of ``tokens`` that this context lacks (its KV cells are
        copied in, its tokens marked evaluated); the rest is evaluated as usual."""
        if self._shared is None:
            return
        prefix = self._shared.best(tokens, self._cached_prefix(tokens))
        if prefix is None:
            return
        llm = cast(Any, self._llm)
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        llm.n_tokens = 0
        data = (ctypes.c_uint8 * len(prefix.data)).from_buffer_copy(prefix.data)
        if llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, data, len(prefix.data), 0) == 0:
            log.warning("a shared prompt prefix of %d tokens could not be loaded; it is evaluated instead", len(prefix.tokens))
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)
            return
        n = len(prefix.tokens)
        llm.input_ids[:n] = prefix.tokens
        llm.n_tokens = n
        llm._requires_eval = True  # no live logits: at least the last token is evaluated again
        self._shared.adopted += 1
        self._shared.adopted_tokens += n

    def _share(self, tokens: Sequence[int]) -> None:
        """Offer this context's cells, which hold exactly ``tokens``, to the other contexts."""
        assert self._shared is not None
        llm = cast(Any, self._llm)
        if len(tokens) < self._shared.min_tokens or llm.n_tokens != len(tokens):
            return
        size = llama_cpp.llama_state_seq_get_size(llm._ctx.ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        n = llama_cpp.llama_state_seq_get_data(llm._ctx.ctx, buf, size, 0)
        if n:
            self._shared.add(tokens, bytes(buf)[:n])

    def _cached_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens``, from the start, this context's KV cache already holds."""
        n = 0
        for a, b in zip(cast(Any, self._llm)._input_ids, tokens, strict=False):
            if a != b:
                break
            n += 1
        return n

    def prefill(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        """Evaluate the prompt up to the end of the last message's text (the user's words so far;
        see :class:`~voiceagent.backends.protocols.LlmContext`).  The caller leaves out a last word
        that may still change: the tokens of a text cut after a whole word are the first tokens of
        the text that goes on, so the turn's prompt matches them."""
        tokens = self._head_tokens(messages, tools)
        if tokens is None:
            return 0
        self._shift(tokens)
        self._adopt(tokens)
        start = keep = self._cached_prefix(tokens)
        if keep >= len(tokens):
            return 0
        llm = cast(Any, self._llm)
        system = self._shareable_system(messages, tools)
        if system is not None and keep < len(system) <= len(tokens) and tokens[: len(system)] == system:
            # The instructions first, on their own, so that their cells can be offered to the
            # other contexts (module llama_prefix); then the rest.
            llm.n_tokens = keep
            llm.eval(system[keep:])
            self._share(system)
            keep = len(system)
        llm.n_tokens = keep  # eval() drops the KV cache from here on, then appends
        if keep < len(tokens):
            llm.eval(tokens[keep:])
        return len(tokens) - start

    def _shareable_system(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int] | None:
        """The tokens of the system message (with the tools' listing) up to where a user's words
        would begin, when they are long enough to share and not shared yet; else None."""
        if self._shared is None or not messages or messages[0].role != "system":
            return None
        system = self._head_tokens([messages[0], Message("user", "")], tools)
        if system is None or len(system) < self._shared.min_tokens or tuple(system) in self._shared:
            return None
        return system

    def end_probability(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> float | None:
        """P(the next token ends the sentence or the turn) after the last message's text without
        its final punctuation (see :class:`~voiceagent.backends.protocols.LlmContext`).  Whisper
        punctuates a half sentence too (the 0.5B gives "How many wheels?" 0.82 with its "?",
        0.0006 without), so the words alone are judged.

        The whole prompt :meth:`stream` will render for ``messages`` and ``tools`` is evaluated in
        the same forward pass, logits taken at the end of the words and at the end of the prompt:
        llama-cpp-python then finds that prompt cached with live logits and samples the reply's
        first token at once, so the verdict costs no extra pass (a separate pass for the words
        alone put ~45 ms before every first token on 2 cores).  Where the words' tokens are not
        the prompt's first tokens (a tokenizer that joins a word with its punctuation), they are
        evaluated alone and the stream evaluates the rest."""
        if not messages or messages[-1].role != "user":
            return None
        words = unpunctuated(messages[-1].content)
        head = self._head_tokens([*messages[:-1], Message("user", words)], tools) if words else None
        if head is None:
            return None
        prompt = self._prompt_tokens(messages, tools)
        self._shift(prompt)
        self._adopt(prompt)
        if prompt[: len(head)] != head or len(prompt) - len(head) >= _BATCH:
            prompt = head
        return sentence_end_probability(self._eval_with_logits_at(prompt, len(head) - 1), self._ends)

    def _eval_with_logits_at(self, tokens: list[int], at: int) -> npt.NDArray[np.float64]:
        """Evaluate ``tokens`` (keeping the cached prefix, but from ``at`` at the latest) and return
        the logits after token ``at``; the logits after the last token stay live for sampling.
        ``tokens`` from ``at`` on must fit one batch."""
        llm = cast(Any, self._llm)
        keep = min(self._cached_prefix(tokens), at)
        start = max(keep, len(tokens) - _BATCH)  # the last batch, which holds ``at``
        llm.n_tokens = keep
        if start > keep:
            llm.eval(tokens[keep:start])
        batch = tokens[start:]
        llm._ctx.kv_cache_seq_rm(-1, start, -1)
        llm._batch.set_batch(batch=batch, n_past=start, logits_all=False)  # logits at the last token
        llm._batch.batch.logits[at - start] = True
        llm._ctx.decode(llm._batch)
        llm.input_ids[start : len(tokens)] = batch
        llm.n_tokens = len(tokens)
        llm._requires_eval = False  # live logits: an identical prompt samples without a pass
        return np.ctypeslib.as_array(llm._ctx.get_logits_ith(at - start), shape=(self._llm.n_vocab(),)).astype(np.float64)

    def stream(
        self,
        messages: Sequence[Message],
        max_tokens: int,
        temperature: float,
        tools: Sequence[Tool] = (),
        tool_choice: ToolChoice = "auto",
    ) -> Iterator[str | ToolCall]:
        """One piece per token: text, ``""`` for a token that went into a tool call, and each call
        once complete (see the module docstring for ``tool_choice``)."""
        try:
            yield from self._stream(messages, max_tokens, temperature, tools, tool_choice)
        finally:
            self._free_sampler()

    def fill_buffers(self) -> None:
        """Evaluate one full batch once, so that the compute buffers are resident from the start
        (~17 MB per context for the 0.5B model).  Otherwise each context's first long prompt makes
        them so in the middle of serving, which reads as memory growth (the soak) though it is
        bounded.  About 0.7 s per context on 2 cores."""
        filler = [Message("system", "a " * _BATCH), Message("user", "Hello.")]
        for _ in self.stream(filler, 1, 0.0):
            pass

    def _free_sampler(self) -> None:
        """Free the generation's sampler chain now.  llama-cpp-python's ``LlamaSampler`` sits in a
        reference cycle (its ExitStack callback closes over it), so only a full garbage collection
        would free it and its native chain with an n_vocab-sized candidate buffer (~1.8 MB for
        Qwen2.5): one more per generation, which is what made the soak's RSS grow."""
        llm = cast(Any, self._llm)
        sampler, llm._sampler = getattr(llm, "_sampler", None), None
        if sampler is not None:
            sampler.close()

    def _stream(
        self, messages: Sequence[Message], max_tokens: int, temperature: float, tools: Sequence[Tool], tool_choice: ToolChoice
    ) -> Iterator[str | ToolCall]:
        # "none" still shows the tools to the template (the prompt, and so the KV cache, stays the
        # one of the turns before), but a grammar keeps the reply from opening a call.
        offered = tools if tool_choice != "none" else ()
        sampling: dict[str, Any] = {
            "stream": True,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_k": 1 if temperature == 0.0 else 40,
            "seed": 0,
        }
        if self._formatter is not None and (self._context_shift or (self._shared is not None and len(self._shared))):
            prompt = self._prompt_tokens(messages, tools)
            self._shift(prompt)
            self._adopt(prompt)
        named = next((t for t in offered if t.name == tool_choice), None)
        if named is not None:
            yield from self._named_call(messages, offered, named, sampling)
            return
        parser = HermesToolParser(
            open_tag=bool(offered) and tool_choice == "required" and self._formatter is not None, names=[t.name for t in offered]
        )
        if parser.open_tag_in_prompt:
            # Open the call in the prompt and hold the model to one JSON object after it.
            opened = self._llm.tokenize(f"{OPEN}\n".encode(), add_bos=False, special=True)
            prompt = self._prompt_tokens(messages, offered) + opened
            grammar = LlamaGrammar.from_string(JSON_GBNF, verbose=False)
            stop = [self._token_text(self._llm.token_eos())]
            chunks: Any = self._llm.create_completion(prompt=prompt, grammar=grammar, stop=stop, **sampling)
            pieces = (str(c["choices"][0].get("text") or "") for c in cast(Iterator[dict[str, Any]], chunks))
        else:
            if tools and not offered:
                sampling["grammar"] = LlamaGrammar.from_string(NO_CALL_GBNF, verbose=False)
            elif offered and tool_choice == "auto" and self._call_bias:
                sampling["logits_processor"] = LogitsProcessorList([first_token_bias(self._call_openers, self._call_bias)])
            chunks = self._llm.create_chat_completion(messages=_messages(messages), tools=cast(Any, tool_dicts(tools) or None), **sampling)
            pieces = (str(c["choices"][0]["delta"].get("content") or "") for c in cast(Iterator[dict[str, Any]], chunks))
        for text in pieces:
            if not text:
                continue
            out = parser.push(text) if offered else [text]
            yield from out if out else [""]
        yield from parser.flush()

    def _named_call(
        self, messages: Sequence[Message], tools: Sequence[Tool], tool: Tool, sampling: dict[str, Any]
    ) -> Iterator[str | ToolCall]:
        """tool_choice names ``tool``: llama.cpp holds the arguments to its schema with a grammar."""
        chunks = self._llm.create_chat_completion(
            messages=_messages(messages),
            tools=cast(Any, tool_dicts(tools)),
            tool_choice={"type": "function", "function": {"name": tool.name}},
            **sampling,
        )
        arguments = ""
        for chunk in cast(Iterator[dict[str, Any]], chunks):
            for call in chunk["choices"][0]["delta"].get("tool_calls") or []:
                arguments += call.get("function", {}).get("arguments") or ""
            yield ""
        yield ToolCall(new_call_id(), tool.name, arguments)


def _reuse(context: LlmContext, messages: Sequence[Message], tools: Sequence[Tool]) -> tuple[int, int]:
    return context.prompt_reuse(messages, tools) if isinstance(context, LlamaCppContext) else (0, 0)


def first_token_bias(tokens: Sequence[int], bias: float) -> Callable[[Any, Any], Any]:
    """A llama.cpp logits processor that adds ``bias`` to the logits of ``tokens`` at the first
    generated position only (the one the processor first sees); later positions are untouched.
    One per generation: it remembers where that generation started."""
    start: list[int] = []

    def process(input_ids: Any, scores: Any) -> Any:
        if not start:
            start.append(len(input_ids))
        if len(input_ids) == start[0]:
            scores[list(tokens)] += bias
        return scores

    return process


def load(config: LlmConfig, cache_dir: Path) -> LlmPool | BatchedEngine:
    """The model ``config.model`` names (:func:`gguf_path`), as the batched engine of
    ``config.sequences`` sequences, or without ``config.batching`` a pool of ``config.contexts``
    contexts (blocking, seconds)."""
    path = gguf_path(config.model, cache_dir, config.quant)
    if config.batching:
        kv = config.kv_tokens or max(16384, 2 * config.context)
        core = BatchContext(path, config.threads, config.context, config.sequences, kv, flash_attn=config.flash_attn)
        return BatchedEngine(
            core, model=config.model, threads=config.threads, call_bias=config.call_bias, context_shift=config.context_shift
        )
    shared = SharedPrefixes() if config.contexts > 1 else None
    contexts = [
        LlamaCppContext(path, config.threads, config.context, config.call_bias, shared, config.context_shift)
        for _ in range(config.contexts)
    ]
    for context in contexts:
        context.fill_buffers()
    return LlmPool(
        contexts,
        PriorityExecutor("llm"),
        name="llama_cpp",
        count_prompt=_reuse,
        threads=config.threads,
        model=config.model,
        window=config.context,
        tokens=contexts[0].prompt_length,
        shared=(lambda: shared.adopted_tokens) if shared is not None else None,
        shifted=lambda: sum(c.shifted_tokens for c in contexts),
    )
