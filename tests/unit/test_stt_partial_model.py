"""``stt.partial_model``: partials decoded by a second, cheaper transcriber; the final, which the
turn is answered from, by the main one; both on one decoder thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from voiceagent.config import Config, PlayoutConfig, SttConfig, TurnConfig, VadConfig
from voiceagent.events import InputTranscriptDelta, InputTranscriptDone, ResponseDone
from voiceagent.tools.spec import Message

from .fakes import FakeEngines, FakeLlm, FakeStt, FakeTurn, pause, speak
from .test_session import running

FINAL = "What is the capital of France?"
DRAFT = "What is the capital on"


def _config() -> Config:
    return Config(
        vad=VadConfig(min_speech_ms=64, stop_ms=96, barge_in_ms=96, prefix_padding_ms=96),
        stt=SttConfig(partials=True, partial_interval_ms=200, partial_model="draft"),
        turn=TurnConfig(silence_ms=320, complete_ms=160, threshold=0.5, speculative=True),
        playout=PlayoutConfig(lead_ms=2000, chunk_ms=125),
    )


def test_partials_come_from_the_partial_model_and_the_turn_from_the_main_one(run: Callable[..., Any]) -> None:
    main_stt, draft_stt = FakeStt(default=FINAL), FakeStt(default=DRAFT)
    fakes = FakeEngines(stt=main_stt, stt_partials=draft_stt, llm=FakeLlm([["Paris."]]), turn=FakeTurn(0.9))

    async def main() -> None:
        async with running(fakes, _config(), session_id="sess_draft") as (session, log):
            await pause(session, 160)
            await speak(session, 960)
            await pause(session, 640)
            _, final = await log.wait_type(InputTranscriptDone)
            await log.wait_type(ResponseDone)
            deltas = log.of_type(InputTranscriptDelta)
            assert deltas, "no partial was shown"
            assert {ev.text for ev in deltas} == {DRAFT}
            assert final.text == FINAL
            [call] = fakes.llm.calls.items
            assert call.messages[-1] == Message("user", FINAL)
            # Every partial went to the draft model and none to the main one: the main one decoded
            # the final (and its early decode) only, each a clip of the whole segment or more.
            drafts, finals = draft_stt.calls.items, main_stt.calls.items
            assert len(drafts) >= 2
            assert 1 <= len(finals) <= 2
            assert min(c.samples for c in finals) > max(c.samples for c in drafts[:1])
            # One decoder thread for both, so the priority executor orders them.
            assert len({c.thread for c in drafts + finals}) == 1

    try:
        run(main(), 20)
    finally:
        fakes.close()
