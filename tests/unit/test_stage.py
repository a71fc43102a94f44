"""pipeline.stage: the run loop, the error contract, generation cancellation, stopping."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from voiceagent.clock import VirtualClock
from voiceagent.errors import StageError
from voiceagent.events import AudioFrame, Clause, Event
from voiceagent.pipeline import Channel, GenerationScope, Stage, StageContext

from .fakes import deadline

Run = Callable[..., Any]


def frame(start_ms: float, gen: int = 0) -> AudioFrame:
    return AudioFrame(t=0.0, gen=gen, pcm=np.zeros(16, dtype=np.int16), start_ms=start_ms)


def clause(gen: int, text: str) -> Clause:
    return Clause(t=0.0, gen=gen, text=text, index=0)


class Harness:
    """A stage context whose notify/report_error record what they get."""

    def __init__(self) -> None:
        self.scope = GenerationScope()
        self.errors: list[tuple[StageError, int]] = []
        self.error_seen = asyncio.Event()
        self.ctx = StageContext("sess_test", VirtualClock(), self.scope, self._notify, self._report)
        self.inbox: Channel[Event] = Channel("in", 16, self.scope)
        self.out: Channel[Event] = Channel("out", 16, self.scope)

    async def _notify(self, event: Event) -> None:
        pass

    async def _report(self, err: StageError, gen: int) -> None:
        self.errors.append((err, gen))
        self.error_seen.set()

    async def next_out(self) -> Event:
        return await asyncio.wait_for(self.out.get(), deadline(2.0))


class ScriptedStage(Stage):
    """Forwards events; ``boom`` clauses / frames at ``start_ms == -1`` raise; gated ones wait."""

    name = "scripted"

    def __init__(self, h: Harness) -> None:
        super().__init__(h.ctx, h.inbox, h.out)
        self.gates: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []

    def gate(self, key: str) -> asyncio.Event:
        self.gates[key] = asyncio.Event()
        self.started[key] = asyncio.Event()
        return self.gates[key]

    async def handle(self, event: Event) -> None:
        key = event.text if isinstance(event, Clause) else f"frame{event.start_ms:g}" if isinstance(event, AudioFrame) else ""
        if key == "boom" or key == "frame-1":
            raise ValueError("boom")
        if key == "stage-error":
            raise StageError("custom", "already wrapped")
        if key in self.gates:
            self.started[key].set()
            try:
                await self.gates[key].wait()
            except asyncio.CancelledError:
                self.cancelled.append(key)
                raise
        await self.emit(event)


def test_run_handles_events_in_order(run: Run) -> None:
    async def main() -> None:
        h = Harness()
        stage = ScriptedStage(h)
        task = asyncio.create_task(stage.run())
        sent: list[Event] = [frame(i) for i in range(5)] + [clause(0, "c")]
        for ev in sent:
            await h.inbox.put(ev)
        got = [await h.next_out() for _ in sent]
        assert got == sent
        assert stage.handled == len(sent)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main(), 5)


def test_exception_in_handle_is_reported_and_the_stage_goes_on(run: Run) -> None:
    async def main() -> None:
        h = Harness()
        stage = ScriptedStage(h)
        task = asyncio.create_task(stage.run())
        await h.inbox.put(clause(0, "boom"))
        await h.inbox.put(clause(0, "after"))
        got = await h.next_out()
        assert isinstance(got, Clause) and got.text == "after"
        assert len(h.errors) == 1
        err, gen = h.errors[0]
        assert isinstance(err, StageError)
        assert err.stage == "scripted"
        assert "ValueError: boom" in err.message
        assert err.retryable is True
        assert gen == 0
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main(), 5)


def test_stage_error_from_handle_is_reported_as_is_with_the_event_generation(run: Run) -> None:
    async def main() -> None:
        h = Harness()
        h.scope.next()
        h.scope.next()
        stage = ScriptedStage(h)
        task = asyncio.create_task(stage.run())
        await h.inbox.put(clause(2, "stage-error"))
        await h.inbox.put(frame(-1, gen=2))
        await h.inbox.put(frame(3, gen=2))
        await h.next_out()
        assert [(e.stage, g) for e, g in h.errors] == [("custom", 2), ("scripted", 2)]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main(), 5)


def test_generation_bump_cancels_stale_child_and_the_stage_keeps_running(run: Run) -> None:
    async def main() -> None:
        h = Harness()
        stage = ScriptedStage(h)
        stage.gate("slow")
        task = asyncio.create_task(stage.run())
        await h.inbox.put(clause(0, "slow"))
        await asyncio.wait_for(stage.started["slow"].wait(), deadline(2.0))
        await h.inbox.put(clause(0, "queued-stale"))
        h.scope.next()  # generation 0 is now stale
        await h.inbox.put(clause(1, "fresh"))
        got = await h.next_out()
        assert isinstance(got, Clause) and got.text == "fresh"  # neither "slow" nor the queued stale clause
        assert stage.cancelled == ["slow"]
        assert h.errors == []  # a cancellation is not a failure
        assert h.inbox.dropped_stale == 1
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main(), 5)


def test_generation_bump_does_not_cancel_work_on_input_events(run: Run) -> None:
    async def main() -> None:
        h = Harness()
        stage = ScriptedStage(h)
        gate = stage.gate("frame7")
        task = asyncio.create_task(stage.run())
        await h.inbox.put(frame(7))
        await asyncio.wait_for(stage.started["frame7"].wait(), deadline(2.0))
        h.scope.next()  # user audio is never stale
        gate.set()
        got = await h.next_out()
        assert isinstance(got, AudioFrame) and got.start_ms == 7
        assert stage.cancelled == []
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main(), 5)


def test_cancelling_run_propagates_and_cancels_child_and_background(run: Run) -> None:
    async def main() -> None:
        h = Harness()
        stage = ScriptedStage(h)
        stage.gate("frame1")
        task = asyncio.create_task(stage.run())
        bg_started = asyncio.Event()
        bg_cancelled = asyncio.Event()

        async def background() -> None:
            bg_started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                bg_cancelled.set()
                raise

        bg = stage.spawn(background(), "bg")
        await h.inbox.put(frame(1))
        await asyncio.wait_for(stage.started["frame1"].wait(), deadline(2.0))
        await asyncio.wait_for(bg_started.wait(), deadline(2.0))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, deadline(2.0))
        assert task.cancelled()
        assert stage.cancelled == ["frame1"]
        assert bg_cancelled.is_set()
        assert bg.cancelled()
        assert h.errors == []

    run(main(), 5)


def test_cancelling_an_idle_stage_propagates(run: Run) -> None:
    async def main() -> None:
        h = Harness()
        task = asyncio.create_task(ScriptedStage(h).run())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, deadline(2.0))
        assert task.cancelled()

    run(main(), 5)


def test_background_task_failure_is_reported(run: Run) -> None:
    async def main() -> None:
        h = Harness()
        stage = ScriptedStage(h)
        h.scope.next()

        async def failing() -> None:
            raise RuntimeError("partial decode failed")

        stage.spawn(failing(), "partial")
        await asyncio.wait_for(h.error_seen.wait(), deadline(2.0))
        [(err, gen)] = h.errors
        assert err.stage == "scripted"
        assert "RuntimeError: partial decode failed" in err.message
        assert gen == h.scope.current

    run(main(), 5)


def test_emit_without_output_channel_raises(run: Run) -> None:
    class Sink(Stage):
        name = "sink"

        async def handle(self, event: Event) -> None:
            await self.emit(event)

    async def main() -> None:
        h = Harness()
        sink = Sink(h.ctx, h.inbox, None)
        with pytest.raises(RuntimeError, match="no output channel"):
            await sink.handle(frame(0))

    run(main(), 5)
