"""One llama.cpp context that decodes many sequences in one pass (the batched engine's core).

Blocking and thread-confined: every method but :meth:`BatchContext.__init__` is called from the
batched engine's one step thread (:mod:`voiceagent.backends.batch_engine`).

The weights are loaded once (one ``llama_model``, through a ``Llama`` object that also gives the
vocabulary and the chat template: :class:`~voiceagent.backends.llama_render.ChatRenderer`); a
second, low-level context with ``n_seq_max`` sequences does the decoding.  Its KV cache is
*unified*: one pool of ``kv_tokens`` cells that every sequence draws on, so a sequence copied
from another (:meth:`copy`) shares the cells of the copied prefix instead of duplicating them
(many conversations with the same long instructions hold them once).

On a CPU a decode step of a small model is bound by reading the weights, so one step that
carries the next token of 8 sequences costs far less than 8 steps (measured on the 2-core EPYC
for the 0.5B: 10 ms for one sequence, 34 ms for 8; ``benchmarks/concurrency.py`` reports it).
"""

from __future__ import annotations

import codecs
import ctypes
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp import Llama
from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

from voiceagent.backends.llama_render import ChatRenderer
from voiceagent.errors import ModelError

__all__ = ["BatchContext", "Entry", "Sampler", "close_gap"]


Entry = tuple[int, int, int, bool]
"""One token of a batch: (token, its position, its sequence, whether to keep the logits after it)."""


class Sampler:
    """One generation's sampler chain, as llama-cpp-python builds it: a repetition penalty over
    the last 64 generated tokens (``repeat``: 1.1 in its chat completions, 1.0 in plain ones),
    a grammar if any, then greedy or top-k/top-p/min-p/temperature with a fixed seed.  Free it
    with :meth:`close`."""

    def __init__(
        self, vocab: Any, n_vocab: int, temperature: float, grammar: str | None = None, repeat: float = 1.1, seed: int = 0
    ) -> None:
        params = llama_cpp.llama_sampler_chain_default_params()
        params.no_perf = True
        self._chain = llama_cpp.llama_sampler_chain_init(params)
        add = llama_cpp.llama_sampler_chain_add
        add(self._chain, llama_cpp.llama_sampler_init_penalties(n_vocab, 64, repeat, 0.0, 0.0))
        if grammar is not None:
            g = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
            if not g:
                llama_cpp.llama_sampler_free(self._chain)
                raise ValueError("the grammar could not be parsed")
            add(self._chain, g)
        if temperature <= 0.0:
            add(self._chain, llama_cpp.llama_sampler_init_greedy())
        else:
            add(self._chain, llama_cpp.llama_sampler_init_top_k(40))
            add(self._chain, llama_cpp.llama_sampler_init_top_p(0.95, 1))
            add(self._chain, llama_cpp.llama_sampler_init_min_p(0.05, 1))
            add(self._chain, llama_cpp.llama_sampler_init_temp(temperature))
            add(self._chain, llama_cpp.llama_sampler_init_dist(seed))

    def sample(self, ctx: Any, index: int) -> int:
        """The next token from the logits at batch index ``index`` (the chain accepts it)."""
        return int(llama_cpp.llama_sampler_sample(self._chain, ctx, index))

    def close(self) -> None:
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None


class Detokenizer:
    """Token pieces to text, a UTF-8 character split across tokens held until it is whole."""

    def __init__(self, vocab: Any) -> None:
        self._vocab = vocab
        self._buf = ctypes.create_string_buffer(256)
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def text(self, token: int) -> str:
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._buf, len(self._buf), 0, False)
        if n < 0:  # a piece longer than the buffer (never for Qwen2.5): grow once
            self._buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, self._buf, len(self._buf), 0, False)
        return str(self._utf8.decode(self._buf.raw[: max(n, 0)]))


def close_gap(memory: Any, seq: int, start: int, removed: int, kept: int) -> None:
    """Drop sequence ``seq``'s cells at ``[start, start + removed)`` and after ``start + removed +
    kept`` in llama.cpp's ``memory``, and move the ``kept`` cells between back by ``removed``
    (:mod:`voiceagent.backends.kv_shift`).  The moved cells must be ``seq``'s alone: a cell
    other sequences share would move for them too."""
    end = start + removed + kept
    llama_cpp.llama_memory_seq_rm(memory, seq, end, -1)
    llama_cpp.llama_memory_seq_rm(memory, seq, start, start + removed)
    llama_cpp.llama_memory_seq_add(memory, seq, start + removed, end, -removed)


class BatchContext:
    """The model, loaded once, and a context of ``sequences`` sequences over a unified KV cache of
    ``kv_tokens`` cells (module docstring).  ``window``: the longest sequence (``llm.context``),
    checked against the model's trained length."""

    def __init__(
        self, path: Path, threads: int, window: int, sequences: int, kv_tokens: int, batch: int = 256, flash_attn: bool = False
    ) -> None:
        verbose = bool(os.environ.get("VOICEAGENT_LLAMA_VERBOSE"))
        # The Llama object's own context is a token: the model, vocabulary and template are what it is for.
        self.llm = Llama(model_path=str(path), n_ctx=32, n_batch=8, n_threads=threads, use_mmap=True, verbose=verbose)
        trained = int(cast(Any, self.llm)._model.n_ctx_train())
        if trained and window > trained:
            self.llm.close()
            raise ModelError(
                f"llm.context {window} is longer than {path.name} was trained for ({trained} tokens); set llm.context <= {trained}"
            )
        self.render = ChatRenderer(self.llm, str(path))
        self.window = window
        self.sequences = sequences
        self.batch_size = batch
        self.vocab = cast(Any, self.llm)._model.vocab
        self.n_vocab = self.llm.n_vocab()
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = max(kv_tokens, window)
        params.n_batch = params.n_ubatch = batch
        params.n_seq_max = sequences
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = True
        # Set either way: llama.cpp's "auto" turns it on for a CPU too, where it slows the small
        # batches a turn waits for (``llm.flash_attn``).
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(cast(Any, self.llm)._model.model, params)
        if not self.ctx:
            self.llm.close()
            raise ModelError(f"llama.cpp could not create a context of {params.n_ctx} tokens for {sequences} sequences")
        self.kv_tokens = int(llama_cpp.llama_n_ctx(self.ctx))
        self._memory = llama_cpp.llama_get_memory(self.ctx)
        self._batch = llama_cpp.llama_batch_init(batch, 0, 1)
        self._threads = threads
        self.eog = {t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab, t)}

    def set_threads(self, threads: int) -> None:
        if threads != self._threads:
            self._threads = threads
            llama_cpp.llama_set_n_threads(self.ctx, threads, threads)

    def decode(self, entries: Sequence[Entry]) -> int:
        """Evaluate ``entries`` in one pass: 0 on success, 1 when the KV cache has no room for
        them (nothing was evaluated: free cells and call again), negative on an error."""
        b = self._batch
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i] = token
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
        b.n_tokens = len(entries)
        return int(llama_cpp.llama_decode(self.ctx, b))

    def logits(self, index: int) -> npt.NDArray[np.float32]:
        """The logits after batch entry ``index`` of the last :meth:`decode` (a writable view,
        valid until the next decode: a bias added to it reaches the sampler)."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, index), shape=(self.n_vocab,))

    def remove(self, seq: int, start: int = 0) -> None:
        """Drop sequence ``seq``'s cells from position ``start`` on (cells other sequences share stay)."""
        llama_cpp.llama_memory_seq_rm(self._memory, seq, start, -1)

    @property
    def can_shift(self) -> bool:
        """Whether cells can move to other positions (:meth:`close_gap`; RoPE models can)."""
        return bool(llama_cpp.llama_memory_can_shift(self._memory))

    def close_gap(self, seq: int, start: int, removed: int, kept: int) -> None:
        """:func:`close_gap` on this context's KV cache."""
        close_gap(self._memory, seq, start, removed, kept)

    def copy(self, src: int, dst: int, n: int) -> None:
        """Make ``dst`` hold ``src``'s first ``n`` positions (shared cells, no evaluation); ``dst``
        must hold nothing before."""
        llama_cpp.llama_memory_seq_cp(self._memory, src, dst, 0, n)

    @staticmethod
    def json_grammar() -> str:
        """The GBNF grammar of any JSON value (the one llama.cpp ships)."""
        return str(JSON_GBNF)

    @staticmethod
    def schema_grammar(schema: str) -> str:
        """The GBNF grammar of a JSON schema (llama.cpp's converter, as its chat handler uses)."""
        return str(json_schema_to_gbnf(schema))

    def sampler(self, temperature: float, grammar: str | None = None, repeat: float = 1.1) -> Sampler:
        return Sampler(self.vocab, self.n_vocab, temperature, grammar, repeat)

    def detokenizer(self) -> Detokenizer:
        return Detokenizer(self.vocab)

    def close(self) -> None:
        """Free the batch, the context and the model (once no step can run)."""
        if self.ctx is not None:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
            self.llm.close()
