"""Nothing per reply outlives its reply: many turns of every kind, then count what is left.

Each round has a retracted speculation (the user pauses mid-sentence), a spoken turn whose reply
calls a tool, a blip of noise, a text turn, a client cancel, a barge-in over a reply being
spoken and the spoken turn that barged in: six replies a round, 150 in all.
Afterwards every per-generation structure of the session, its stages and the Realtime codec that
rendered its events may hold at most the live reply (there is none once the session is quiet).
"""

from __future__ import annotations

from voiceagent.config import Config, ServerConfig
from voiceagent.events import AudioDelta, FunctionCallAdded, PlaybackCleared, ResponseDone, ToolOutputAdded
from voiceagent.settings import settings_from_config
from voiceagent.tools.spec import Tool, ToolCall
from voiceagent.transports.realtime_codec import RealtimeCodec

from .fakes import FakeLlm, FakeStt, FakeTurn, pause, speak
from .test_session import MakeFakes, Run, make_config, make_fakes, running, tokens

__all__ = ["make_fakes"]

ROUNDS = 25
TOOL = Tool("lookup", "Look something up.", {"type": "object", "properties": {}})


def test_after_many_turns_no_per_reply_structure_holds_more_than_the_live_reply(run: Run, make_fakes: MakeFakes) -> None:
    script: list[list[str | ToolCall | Exception]] = []
    for i in range(ROUNDS):
        script += [
            tokens("Held back answer."),  # the retracted speculation
            [*tokens("Let me look."), ToolCall(f"call_{i}", "lookup", "{}")],
            tokens("A text answer."),
            tokens("One two three four five six seven eight nine ten."),
            tokens("Eleven twelve thirteen fourteen fifteen sixteen seventeen."),  # barged in on
            tokens("The answer after the barge-in."),
        ]
    # (the first half must not end on "the", "of"...: such a transcript is not answered
    # speculatively, and each round needs a speculation to retract; voiceagent/text/turn_words.py)
    fakes = make_fakes(stt=FakeStt(["what is it", "like outside"] * (ROUNDS * 4)), llm=FakeLlm(script), turn=FakeTurn(0.1))
    config = Config(
        vad=make_config().vad,
        stt=make_config().stt,
        turn=make_config().turn,
        playout=make_config().playout,
        server=ServerConfig(max_history_items=40),
    )

    async def main() -> None:
        async with running(fakes, config) as (session, log):
            session.update(tools=(TOOL,))
            barged_in: list[str] = []
            for _ in range(ROUNDS):
                done = len(log.of_type(ResponseDone))
                await speak(session, 320)
                await pause(session, 192)  # speculation starts ...
                await speak(session, 320)  # ... and is retracted
                await pause(session, 640)
                await log.wait_for(lambda e, n=done: len(log.of_type(ResponseDone)) > n)
                await speak(session, 64)  # a blip: no turn
                await pause(session, 192)
                await session.add_text("and in text?")
                await session.create_response()
                await log.wait_for(lambda e, n=done + 1: len(log.of_type(ResponseDone)) > n)
                await session.create_response()
                await session.cancel_response()  # the client cancels
                await log.wait_for(lambda e, n=done + 2: len(log.of_type(ResponseDone)) > n)
                spoken = await session.create_response()
                barged_in.append(spoken)
                await log.wait_for(lambda e, r=spoken: isinstance(e, AudioDelta) and e.response_id == r)
                await speak(session, 320)  # the user talks over it ...
                await log.wait_for(lambda e, r=spoken: isinstance(e, ResponseDone) and e.response_id == r)
                await pause(session, 640)  # ... and is answered
                await log.wait_for(lambda e, n=done + 4: len(log.of_type(ResponseDone)) > n)
                # At a round's end at most the reply still being spoken is kept, and playout holds
                # audio for no other generation.
                assert len(session.replies.core.live()) <= 1, session.replies.core.live()
                assert all(gen == session.scope.current for gen in session.playout.holding())
            await session.quiet()
            await pause(session, 640)

            # Every call the client saw is closed exactly once, but the last one, which may still wait.
            calls = [e.call_id for e in log.of_type(FunctionCallAdded)]
            outputs = [e.call_id for e in log.of_type(ToolOutputAdded)]
            assert len(calls) >= ROUNDS // 2 and len(set(outputs)) == len(outputs)
            assert set(outputs) <= set(calls) and len(set(calls) - set(outputs)) <= 1
            assert session.active_response_id is None
            # Each reply talked over while its audio played was cleared (a barge-in, not a cancel).
            cleared = {e.response_id for e in log.of_type(PlaybackCleared)}
            assert len(barged_in) == ROUNDS and set(barged_in) <= cleared
            # The session is quiet: no reply is live, and playout holds no audio for any.
            assert session.replies.core.live() == {}
            assert session.playout.holding() == {}
            # The generation gates keep a bounded window (8) of recent generations, not one per turn.
            for gate in (session.llm._gate, session.llm._first_token, session.tts._gate):
                assert len(gate._events) <= 9, len(gate._events)
            assert len(session.history.items) <= 40
            # The codec that renders these events for a client ends with nothing per reply left.
            codec = RealtimeCodec(settings_from_config(config), 24000)
            for ev in log.events:
                codec.encode(ev)
            assert codec.pending() == {"audio_streams": 0, "text_only": 0, "out_of_band": 0, "partials": 0, "streaming": 0}

    run(main(), 120)
