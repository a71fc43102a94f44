"""A fake :class:`~voiceagent.backends.llama_batch.BatchContext` for the batched engine's tests.

It holds each sequence's KV cells the way llama.cpp's unified cache does (cells, shared by the
sequences a copy gave them to, a fixed number in all) and fails loudly when a step puts a token
anywhere but at the end of its sequence.  Its "model" answers from what a sequence's cells hold:
the reply to a prompt is ``#<checksum of the cells up to the reply>.``, so a sequence whose cells
were mixed up with another's, or cut short, answers visibly wrong.

Text is one token per character (token = code point); ``<a>`` ends a prompt, ``\\x00`` is the
end of generation.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from voiceagent.tools.spec import Message, Tool

EOG = 0
N_VOCAB = 0x400
REPLY = "<a>"


def render(messages: Sequence[Message]) -> str:
    return "".join(f"<{m.role[0]}>{m.content}" for m in messages)


def answer(prompt: str) -> str:
    """What the fake model replies to ``prompt`` (the rendered messages, without ``<a>``)."""
    return f"#{sum(map(ord, prompt + REPLY)) % 9973}."


def reply_for(messages: Sequence[Message]) -> str:
    return answer(render(messages))


class FakeRenderer:
    formatter = object()
    ends = np.array([ord("."), ord("?"), ord("!"), EOG])
    call_openers: ClassVar[list[int]] = [ord("<")]

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def prompt_tokens(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int]:
        return self.tokenize(render(messages) + REPLY)

    def head_tokens(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int] | None:
        if not messages or messages[-1].role != "user":
            return None
        return self.tokenize(render(messages))

    def prompt_length(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        return len(self.prompt_tokens(messages, tools))


class FakeSampler:
    def __init__(self, core: FakeBatch) -> None:
        self.core = core

    def sample(self, ctx: Any, index: int) -> int:
        return int(np.argmax(self.core.logits(index)))

    def close(self) -> None:
        self.core.samplers_open -= 1


class FakeDetok:
    def text(self, token: int) -> str:
        return chr(token)


class FakeBatch:
    """The blocking core (module docstring).  ``gate``, when set, is waited for before each
    decode (in the step thread); ``fail_next`` makes the next decode raise."""

    ctx = object()
    eog = frozenset({EOG})
    can_shift = True

    def __init__(self, sequences: int = 4, kv_tokens: int = 4096, batch_size: int = 64, window: int = 2048) -> None:
        self.sequences = sequences
        self.kv_tokens = kv_tokens
        self.batch_size = batch_size
        self.window = window
        self.render = FakeRenderer()
        self.cells: dict[int, list[int]] = {s: [] for s in range(sequences)}
        """Each sequence's cells, by position (cell ids; a copy shares them)."""
        self.content: dict[int, int] = {}
        """cell id -> token."""
        self._ids = itertools.count()
        self.batches: list[list[tuple[int, int, int, bool]]] = []
        self._next: list[int] = []
        self.gate: threading.Event | None = None
        self.fail_next = False
        self.shifts: list[tuple[int, int, int, int]] = []
        """(sequence, start, removed, kept) of every :meth:`close_gap`."""
        self.threads: list[int] = []
        self.samplers_open = 0
        self.closed = False
        self.on_decode: Callable[[list[tuple[int, int, int, bool]]], None] | None = None

    def tokens(self, seq: int) -> list[int]:
        return [self.content[c] for c in self.cells[seq]]

    def live_cells(self) -> int:
        return len({c for cells in self.cells.values() for c in cells})

    def decode(self, entries: Sequence[tuple[int, int, int, bool]]) -> int:
        if self.gate is not None:
            self.gate.wait(30)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the fake model failed")
        entries = list(entries)
        assert 0 < len(entries) <= self.batch_size
        if self.live_cells() + len(entries) > self.kv_tokens:
            return 1
        seen: dict[int, int] = {}
        for _token, pos, seq, _ in entries:
            expected = seen.get(seq, len(self.cells[seq]))
            assert pos == expected, f"sequence {seq}: a token at {pos}, its cells end at {expected}"
            seen[seq] = pos + 1
        self._next = []
        for token, _pos, seq, _ in entries:
            cell = next(self._ids)
            self.content[cell] = token
            self.cells[seq].append(cell)
            self._next.append(self._predict(self.tokens(seq)))
        self.batches.append(entries)
        if self.on_decode is not None:
            self.on_decode(entries)
        return 0

    def _predict(self, tokens: list[int]) -> int:
        text = "".join(map(chr, tokens))
        at = text.rfind(REPLY)
        if at < 0:
            return ord(" ")
        target = answer(text[:at]) + "\x00"
        done = text[at + len(REPLY) :]
        return ord(target[len(done)]) if len(done) < len(target) and target.startswith(done) else EOG

    def logits(self, index: int) -> npt.NDArray[np.float32]:
        out = np.zeros(N_VOCAB, dtype=np.float32)
        out[self._next[index]] = 10.0
        return out

    def remove(self, seq: int, start: int = 0) -> None:
        del self.cells[seq][start:]

    def close_gap(self, seq: int, start: int, removed: int, kept: int) -> None:
        cells = self.cells[seq]
        moved = cells[start + removed : start + removed + kept]
        assert len(moved) == kept, "a shift of cells the sequence does not hold"
        shared = {c for s, held in self.cells.items() if s != seq for c in held}
        # llama.cpp would move a shared cell for every sequence holding it: the others' cache breaks.
        assert not shared & set(moved), "a shift moved cells another sequence shares"
        self.cells[seq] = cells[:start] + moved
        self.shifts.append((seq, start, removed, kept))

    def copy(self, src: int, dst: int, n: int) -> None:
        assert not self.cells[dst], "a copy goes to an empty sequence"
        self.cells[dst] = list(self.cells[src][:n])

    def set_threads(self, threads: int) -> None:
        self.threads.append(threads)

    def sampler(self, temperature: float, grammar: str | None = None, repeat: float = 1.1) -> FakeSampler:
        self.samplers_open += 1
        return FakeSampler(self)

    def detokenizer(self) -> FakeDetok:
        return FakeDetok()

    @staticmethod
    def json_grammar() -> str:
        return "json"

    @staticmethod
    def schema_grammar(schema: str) -> str:
        return schema

    def close(self) -> None:
        self.closed = True
