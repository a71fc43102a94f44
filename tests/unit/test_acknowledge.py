"""``llm.acknowledge_ms``: a user turn whose answer has no words that long after the LLM was
asked starts with a short spoken acknowledgement, marked as such all the way to the client and
kept apart from the content in the turn's timeline (scripted fakes, a virtual clock)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Sequence

from voiceagent.clock import VirtualClock
from voiceagent.config import LlmConfig
from voiceagent.config.prompts import ACKNOWLEDGEMENTS
from voiceagent.conversation.history import AssistantItem
from voiceagent.events import OutputTranscriptDelta, ResponseDone, ResponseStatus, TurnMetrics
from voiceagent.tools.spec import Message, Tool, ToolCall

from .fakes import FakeLlm, FakeStt, FakeTurn, pause
from .test_session import MakeFakes, Run, make_config, make_fakes, running, say_turn, tokens

__all__ = ["make_fakes"]  # the fixture, imported for pytest


class HeldLlm(FakeLlm):
    """Its replies' first piece waits until :attr:`go` is set (a model still thinking)."""

    def __init__(self, replies: Sequence[Sequence[str]]) -> None:
        super().__init__(replies)
        self.go = threading.Event()

    def stream(
        self, messages: Sequence[Message], max_tokens: int, temperature: float, tools: Sequence[Tool] = (), tool_choice: str = "auto"
    ) -> Iterator[str | ToolCall]:
        pieces = super().stream(messages, max_tokens, temperature, tools, tool_choice)

        def held() -> Iterator[str | ToolCall]:
            self.go.wait(timeout=30)
            yield from pieces

        return held()


def _config(acknowledge_ms: int) -> object:
    config = make_config()
    return dataclasses.replace(config, llm=LlmConfig(call_check=False, acknowledge_ms=acknowledge_ms))


def test_a_late_answer_starts_with_an_acknowledgement_marked_apart_from_the_content(run: Run, make_fakes: MakeFakes) -> None:
    llm = HeldLlm([tokens("It is sunny.")])
    fakes = make_fakes(stt=FakeStt(["what is the weather"]), llm=llm, turn=FakeTurn(0.9))

    async def main() -> None:
        clock = VirtualClock()
        async with running(fakes, _config(0), clock) as (session, log):  # type: ignore[arg-type]
            await say_turn(session)
            while not log.of_type(OutputTranscriptDelta):  # the turn confirmed by silence: time goes on
                await pause(session, 100)
            _, ack = await log.wait_type(OutputTranscriptDelta)
            assert (ack.text.strip(), ack.ack) == (ACKNOWLEDGEMENTS[0], True)  # said while the model still thinks
            clock.advance(0.3)  # the model thinks on while the acknowledgement plays
            llm.go.set()
            _, done = await log.wait_type(ResponseDone)
            assert done.status is ResponseStatus.COMPLETED
            said = [(d.text.strip(), d.ack) for d in log.of_type(OutputTranscriptDelta)]
            assert said == [(ACKNOWLEDGEMENTS[0], True), ("It is sunny.", False)]
            [metrics] = log.of_type(TurnMetrics)
            assert metrics.spans["content_audio_sent"] >= metrics.spans["first_audio_sent"] + 300, metrics.spans
            # Heard, but not what the model reads back: it would learn to open every answer so.
            answer = session.history.items[-1]
            assert isinstance(answer, AssistantItem) and answer.text == "It is sunny." and answer.clauses[0].ack
            assert answer.audio_ms > fakes.tts.samples_for("It is sunny.") * 1000 / 24000  # the acknowledgement's audio counts
            assert [c.strip() for c in fakes.tts.calls.items] == [ACKNOWLEDGEMENTS[0], "It is sunny."]

    run(main(), 20)


def test_an_answer_with_words_in_time_has_no_acknowledgement(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(["what is the weather"]), llm=FakeLlm([tokens("It is sunny.")]), turn=FakeTurn(0.9))

    async def main() -> None:
        async with running(fakes, _config(400)) as (session, log):  # type: ignore[arg-type]
            await say_turn(session)
            await log.wait_type(ResponseDone)
            assert [(d.text.strip(), d.ack) for d in log.of_type(OutputTranscriptDelta)] == [("It is sunny.", False)]
            [metrics] = log.of_type(TurnMetrics)
            assert metrics.spans["content_audio_sent"] == metrics.spans["first_audio_sent"]

    run(main(), 20)


def test_off_by_default(run: Run, make_fakes: MakeFakes) -> None:
    llm = HeldLlm([tokens("It is sunny.")])
    fakes = make_fakes(stt=FakeStt(["what is the weather"]), llm=llm, turn=FakeTurn(0.9))
    assert LlmConfig().acknowledge_ms == -1

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await say_turn(session)
            llm.go.set()
            await log.wait_type(ResponseDone)
            assert [d.ack for d in log.of_type(OutputTranscriptDelta)] == [False]

    run(main(), 20)
