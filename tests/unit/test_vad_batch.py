"""voiceagent.stages.vad_batch: the frames of every session go to the VAD in one call."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from tests.unit.fakes import FakeVad, FakeVadStream, executor
from voiceagent.audio import Float32Array
from voiceagent.stages.vad_batch import VadBatch

SPEECH = np.full(512, 0.5, dtype=np.float32)  # one window the fake hears as speech
QUIET = np.zeros(512, dtype=np.float32)


class CountingVad(FakeVad):
    """A fake VAD that batches: records the size of every call, and can be held or made to fail."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # set when a call has begun (before the gate)
        self.fail: Exception | None = None

    def process_many(self, jobs: Sequence[tuple[FakeVadStream, Float32Array]]) -> list[list[float]]:
        self.calls.append(len(jobs))
        self.entered.set()
        self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        return [stream.process(pcm) for stream, pcm in jobs]


def test_a_lone_session_waits_for_no_one(run: Any) -> None:
    vad = CountingVad()

    async def scenario() -> None:
        batch = VadBatch.of(vad)
        stream = vad.stream()
        for k, pcm in enumerate((SPEECH, QUIET, SPEECH)):
            task = asyncio.create_task(batch.process(stream, pcm))
            await asyncio.sleep(0)  # the frame is handed over, and its batch has started at once
            assert batch.started == k + 1
            await task
        assert vad.calls == [1, 1, 1]
        assert stream.probs == [0.9, 0.05, 0.9]

    run(scenario(), 10)


def test_sessions_speaking_together_share_one_call_and_each_gets_its_own_answer(run: Any) -> None:
    vad = CountingVad()

    async def scenario() -> None:
        batch = VadBatch.of(vad)
        streams = [vad.stream() for _ in range(4)]
        # Every stream has sent audio lately (it is active), so a frame waits for the others'.
        await asyncio.gather(*(batch.process(s, QUIET) for s in streams))
        vad.calls.clear()
        frames = [SPEECH if i % 2 else QUIET for i in range(4)]
        results = await asyncio.gather(*(batch.process(s, pcm) for s, pcm in zip(streams, frames, strict=True)))
        assert vad.calls == [4]  # one call for the four
        assert results == [[0.05], [0.9], [0.05], [0.9]]

    run(scenario(), 10)


def test_frames_that_arrive_while_a_batch_runs_go_in_the_next_one_in_order(run: Any) -> None:
    vad = CountingVad()

    async def scenario() -> None:
        batch = VadBatch.of(vad)
        a, b = vad.stream(), vad.stream()
        vad.gate.clear()
        first = asyncio.create_task(batch.process(a, SPEECH))
        assert await asyncio.to_thread(vad.entered.wait, 10)  # the first batch is in the executor, held
        second = asyncio.create_task(batch.process(b, QUIET))
        await asyncio.sleep(0)
        assert vad.calls == [1]  # b waits: a batch is running
        vad.gate.set()
        assert await first == [0.9] and await second == [0.05]
        assert vad.calls == [1, 1]

    run(scenario(), 10)


def test_a_session_that_stopped_sending_holds_the_others_one_window_at_most(run: Any) -> None:
    vad = CountingVad()

    async def scenario() -> None:
        batch = VadBatch.of(vad)
        quiet, talking = vad.stream(), vad.stream()
        await asyncio.gather(batch.process(quiet, QUIET), batch.process(talking, QUIET))
        # `quiet` sends nothing more: `talking`'s frame goes alone once the wait runs out.
        assert await batch.process(talking, SPEECH) == [0.9]
        assert vad.calls[-1] == 1

    run(scenario(), 10)


def test_a_model_that_raises_fails_every_frame_of_its_batch_and_the_next_batch_works(run: Any) -> None:
    vad = CountingVad()

    async def scenario() -> None:
        batch = VadBatch.of(vad)
        a, b = vad.stream(), vad.stream()
        await asyncio.gather(batch.process(a, QUIET), batch.process(b, QUIET))
        vad.fail = RuntimeError("onnx blew up")
        results = await asyncio.gather(batch.process(a, SPEECH), batch.process(b, SPEECH), return_exceptions=True)
        assert all(isinstance(r, RuntimeError) and "onnx blew up" in str(r) for r in results)
        vad.fail = None
        assert await batch.process(a, SPEECH) == [0.9]

    run(scenario(), 10)


def test_a_cancelled_frame_drops_its_result_and_the_others_get_theirs(run: Any) -> None:
    vad = CountingVad()

    async def scenario() -> None:
        batch = VadBatch.of(vad)
        a, b = vad.stream(), vad.stream()
        await asyncio.gather(batch.process(a, QUIET), batch.process(b, QUIET))
        vad.gate.clear()
        vad.entered.clear()
        ta = asyncio.create_task(batch.process(a, SPEECH))
        tb = asyncio.create_task(batch.process(b, SPEECH))
        assert await asyncio.to_thread(vad.entered.wait, 10)  # both frames are in the model call, held
        assert vad.calls[-1] == 2
        ta.cancel()
        vad.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await ta
        assert await tb == [0.9]
        assert a.probs[-1] == 0.9  # the cancelled frame was still processed: a's state follows its audio

    run(scenario(), 10)


def test_a_backend_without_batching_is_looped_inside_one_executor_call(run: Any) -> None:
    vad = FakeVad()
    vad.executor = executor("one-vad-thread")

    async def scenario() -> None:
        batch = VadBatch.of(vad)
        streams = [vad.stream() for _ in range(3)]
        await asyncio.gather(*(batch.process(s, QUIET) for s in streams))
        results = await asyncio.gather(*(batch.process(s, SPEECH) for s in streams))
        assert results == [[0.9]] * 3
        assert batch.frames == 6 and batch.batches <= 4

    run(scenario(), 10)
