"""``semantic_vad`` (its eagerness table) and ``server_vad``'s ``idle_timeout_ms``: decoded and
echoed by the codec, run by the turn stage and the session (scripted fakes, a virtual clock)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

from voiceagent.clock import VirtualClock
from voiceagent.config import Config, TurnConfig
from voiceagent.config.prompts import IDLE_PROMPT
from voiceagent.errors import ProtocolError
from voiceagent.events import Event, InputCommitted, InputSpeechStarted, InputTimeoutTriggered, ResponseCreated, ResponseDone
from voiceagent.settings import TurnDetection, settings_from_config
from voiceagent.stages.turn import EAGERNESS, Confirm, Endpointer, Endpointing
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import UpdateSession

from .fakes import FakeLlm, FakeTurn, speak
from .test_endpointer import segment
from .test_session import MakeFakes, Run, make_config, make_fakes, running, tokens

__all__ = ["make_fakes"]  # the fixture, imported for pytest

TD = "session.audio.input.turn_detection"


def update(codec: RealtimeCodec, td: Any) -> dict[str, Any]:
    cmd = codec.decode(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": td}}}}))
    assert isinstance(cmd, UpdateSession)
    return cmd.changes


# --------------------------------------------------------------------------- the wire


def test_semantic_vad_is_run_and_echoed_as_itself() -> None:
    codec = RealtimeCodec(settings_from_config(Config()), 22050)
    changes = update(codec, {"type": "semantic_vad", "eagerness": "high", "interrupt_response": False})
    td = changes["turn_detection"]
    assert (td.type, td.eagerness, td.interrupt_response) == ("semantic_vad", "high", False)
    codec.settings = dataclasses.replace(codec.settings, turn_detection=td)
    echoed = codec.session_object()["audio"]["input"]["turn_detection"]
    assert echoed == {"type": "semantic_vad", "eagerness": "high", "create_response": True, "interrupt_response": False}
    # The GA type of session.updated accepts it as semantic_vad.
    from openai.types.realtime.realtime_audio_input_turn_detection import SemanticVad

    SemanticVad.model_validate(echoed)


def test_a_partial_turn_detection_update_keeps_eagerness_and_idle_timeout() -> None:
    codec = RealtimeCodec(settings_from_config(Config()), 22050)
    for first, then, kept in (
        ({"type": "semantic_vad", "eagerness": "high"}, {"type": "semantic_vad", "interrupt_response": False}, ("eagerness", "high")),
        ({"type": "server_vad", "idle_timeout_ms": 6000}, {"type": "server_vad", "threshold": 0.7}, ("idle_timeout_ms", 6000)),
    ):
        codec.settings = dataclasses.replace(codec.settings, turn_detection=update(codec, first)["turn_detection"])
        td = update(codec, then)["turn_detection"]
        assert getattr(td, kept[0]) == kept[1], td
    # An explicit null still turns the idle timeout off; a change of mode starts from its defaults.
    assert update(codec, {"type": "server_vad", "idle_timeout_ms": None})["turn_detection"].idle_timeout_ms is None
    assert update(codec, {"type": "semantic_vad"})["turn_detection"].eagerness == "auto"


def test_server_vad_carries_idle_timeout_ms() -> None:
    codec = RealtimeCodec(settings_from_config(Config()), 22050)
    td = update(codec, {"type": "server_vad", "idle_timeout_ms": 6000})["turn_detection"]
    assert (td.type, td.idle_timeout_ms) == ("server_vad", 6000)
    codec.settings = dataclasses.replace(codec.settings, turn_detection=td)
    echoed = codec.session_object()["audio"]["input"]["turn_detection"]
    assert echoed["type"] == "server_vad" and echoed["idle_timeout_ms"] == 6000 and "eagerness" not in echoed


@pytest.mark.parametrize(
    ("td", "param"),
    [
        ({"type": "semantic_vad", "eagerness": "eager"}, f"{TD}.eagerness"),
        ({"type": "semantic_vad", "silence_duration_ms": 500}, f"{TD}.silence_duration_ms"),
        ({"type": "semantic_vad", "idle_timeout_ms": 5000}, f"{TD}.idle_timeout_ms"),
        ({"type": "server_vad", "eagerness": "high"}, f"{TD}.eagerness"),
        ({"type": "server_vad", "idle_timeout_ms": 10}, f"{TD}.idle_timeout_ms"),
        ({"type": "server_vad", "idle_timeout_ms": "5000"}, f"{TD}.idle_timeout_ms"),
    ],
)
def test_fields_of_the_other_mode_or_bad_values_are_refused(td: dict[str, Any], param: str) -> None:
    with pytest.raises(ProtocolError) as info:
        update(RealtimeCodec(settings_from_config(Config()), 22050), td)
    assert (info.value.code, info.value.param) == ("invalid_value", param)


# --------------------------------------------------------------------------- the eagerness table


def test_medium_and_auto_are_the_servers_defaults() -> None:
    d = TurnConfig()
    assert EAGERNESS["medium"] == Endpointing(d.silence_ms, d.complete_ms, d.threshold, d.incomplete_ms, d.doubt_ms)
    assert EAGERNESS["auto"] == EAGERNESS["medium"]


def test_each_level_waits_less_than_the_one_below_it_on_every_rule() -> None:
    low, medium, high = EAGERNESS["low"], EAGERNESS["medium"], EAGERNESS["high"]
    for name in ("silence_ms", "complete_ms", "threshold", "incomplete_ms", "doubt_ms"):
        assert getattr(high, name) < getattr(medium, name) < getattr(low, name), name


@pytest.mark.parametrize(("level", "confirmed"), [("high", True), ("medium", False), ("low", False)])
def test_the_same_pause_ends_the_turn_at_high_eagerness_only(level: str, confirmed: bool) -> None:
    """400 ms of silence after a whole sentence the turn model doubts (0.4): the fallback of high
    (350 ms) ends the turn; medium and low wait on."""
    ends = EAGERNESS[level]
    ep = Endpointer(speculative=False, use_model=True, incomplete_ms=float(ends.incomplete_ms), doubt_ms=float(ends.doubt_ms))
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    ep.on_segment(segment("what is the weather today"), respond=True)
    args = (float(ends.complete_ms), float(ends.silence_ms), ends.threshold)
    ep.on_probability(0.4, *args)
    actions = ep.on_silence(400.0, *args)
    assert (actions == [Confirm("what is the weather today", 1000.0)]) is confirmed


def test_unfinished_words_wait_by_level() -> None:
    """'the capital of' waits incomplete_ms: 1 s at high, 3 s at low."""
    for level, waits in (("high", 1000.0), ("low", 3000.0)):
        ends = EAGERNESS[level]
        ep = Endpointer(speculative=False, use_model=False, incomplete_ms=float(ends.incomplete_ms))
        ep.on_speech_started()
        ep.on_speech_stopped(500.0)
        ep.on_segment(segment("tell me the capital of"), respond=True)
        args = (float(ends.complete_ms), float(ends.silence_ms), ends.threshold)
        assert ep.on_silence(waits - 50.0, *args) == []
        assert ep.on_silence(waits, *args) != []


def test_the_turn_stage_follows_the_sessions_mode(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes()

    async def main() -> None:
        async with running(fakes, make_config()) as (session, _log):
            server = session.turn.endpointing()
            assert server.silence_ms == session.settings.turn_detection.silence_duration_ms  # type: ignore[union-attr]
            for level in ("low", "high"):
                session.update(turn_detection=TurnDetection(0.5, 96, 320, type="semantic_vad", eagerness=level))
                assert session.turn.endpointing() == EAGERNESS[level]

    run(main(), 20)


# --------------------------------------------------------------------------- idle timeout


def idle_config(ms: int) -> dict[str, Any]:
    return {"turn_detection": TurnDetection(0.5, 96, 320, idle_timeout_ms=ms)}


def test_the_idle_timeout_triggers_after_the_reply_has_played_and_answers(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("It is noon."), tokens("Are you still there?")]))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(), clock) as (session, log):
            session.update(**idle_config(2000))
            await session.add_text("What time is it?")
            i_done, _ = await log.wait_type(ResponseDone, response_id=await session.create_response())
            assert session.replies.core.idle_armed
            clock.advance(30.0)  # past the reply's last audio plus 2 s
            i_timeout, timeout = await log.wait_type(InputTimeoutTriggered, after=i_done)
            i_committed, committed = await log.wait_type(InputCommitted, after=i_timeout)
            assert committed.item_id == timeout.item_id
            assert timeout.audio_end_ms - timeout.audio_start_ms <= 2000.0
            _, created = await log.wait_type(ResponseCreated, after=i_committed)
            _, nudge = await log.wait_type(ResponseDone, response_id=created.response_id)
            assert nudge.text == "Are you still there?"
            prompt = fakes.llm.calls.items[1]
            assert prompt.messages[0].content.endswith(IDLE_PROMPT)
            assert session.history.find(timeout.item_id) is not None

    run(main(), 20)


def test_speech_before_the_idle_timeout_disarms_it(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("It is noon.")]), turn=FakeTurn(0.9))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(), clock) as (session, log):
            session.update(**idle_config(2000))
            await session.add_text("What time is it?")
            i_done, _ = await log.wait_type(ResponseDone, response_id=await session.create_response())
            assert session.replies.core.idle_armed
            await speak(session, 320)
            await log.wait_type(InputSpeechStarted, after=i_done)
            assert not session.replies.core.idle_armed
            assert log.of_type(InputTimeoutTriggered) == []

    run(main(), 20)


def test_no_idle_timeout_without_the_setting_or_with_semantic_vad(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("One."), tokens("Two.")]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await session.add_text("Count")
            await log.wait_type(ResponseDone, response_id=await session.create_response())
            assert not session.replies.core.idle_armed
            session.update(turn_detection=TurnDetection(0.5, 96, 320, type="semantic_vad", idle_timeout_ms=2000))
            await log.wait_type(ResponseDone, response_id=await session.create_response())
            assert not session.replies.core.idle_armed

    run(main(), 20)


def test_an_idle_timeout_due_in_a_transcription_session_does_nothing(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("It is noon.")]))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(), clock) as (session, log):
            session.update(**idle_config(2000))
            await session.add_text("What time is it?")
            await log.wait_type(ResponseDone, response_id=await session.create_response())
            [task] = session.replies.running("idle")
            assert task is not None
            # The settings alone (not through update(), which disarms): the check at fire time.
            session.settings = dataclasses.replace(session.settings, kind="transcription")
            clock.advance(30.0)
            await asyncio.wait_for(asyncio.shield(task), 5)
            assert log.of_type(InputTimeoutTriggered) == [] and log.of_type(InputCommitted) == []
            assert len(session.history.items) == 2

    run(main(), 20)


def test_an_idle_timeout_that_has_fired_is_still_cancelled_by_close(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("It is noon.")]))
    clock = VirtualClock()
    stuck = asyncio.Event()

    async def main() -> None:
        async with running(fakes, make_config(), clock) as (session, log):
            session.update(**idle_config(2000))
            await session.add_text("What time is it?")
            await log.wait_type(ResponseDone, response_id=await session.create_response())
            [task] = session.replies.running("idle")
            assert task is not None

            emit = session.emit

            async def blocked(event: Event) -> None:
                if isinstance(event, InputCommitted):
                    stuck.set()
                    await asyncio.Event().wait()  # never set: the fired timeout waits here until cancelled
                await emit(event)

            session.emit = blocked  # type: ignore[method-assign]
            clock.advance(30.0)
            await log.wait_type(InputTimeoutTriggered)
            await asyncio.wait_for(stuck.wait(), 5)
            assert not session.replies.core.idle_armed and not task.done()
        # aclose() has returned: the fired timeout was cancelled and awaited, not left behind.
        assert task.cancelled()

    run(main(), 20)


def test_an_idle_timeout_set_on_a_session_that_never_spoke_counts_from_the_update(run: Run, make_fakes: MakeFakes) -> None:
    """A caller who connects, asks for ``idle_timeout_ms`` and says nothing is nudged: the count
    does not wait for a first reply that never comes."""
    fakes = make_fakes(llm=FakeLlm([tokens("Are you still there?")]))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(), clock) as (session, log):
            session.update(**idle_config(2000))
            assert session.replies.core.idle_armed
            clock.advance(1.9)
            await asyncio.sleep(0)
            assert log.of_type(InputTimeoutTriggered) == []
            clock.advance(0.2)
            i_timeout, _ = await log.wait_type(InputTimeoutTriggered)
            _, created = await log.wait_type(ResponseCreated, after=i_timeout)
            _, nudge = await log.wait_type(ResponseDone, response_id=created.response_id)
            assert nudge.text == "Are you still there?"
            # Turned off again: disarmed at once.
            assert session.replies.core.idle_armed  # re-armed after the nudge played
            session.update(turn_detection=TurnDetection(0.5, 96, 320))
            assert not session.replies.core.idle_armed

    run(main(), 20)


def test_a_cancelled_reply_starts_the_idle_count_too(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("A long story begins here and goes on for a very long time.")]))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(), clock) as (session, log):
            session.update(**idle_config(2000))
            await session.add_text("Tell me a story.")
            response_id = await session.create_response()
            assert not session.replies.core.idle_armed  # a response is under way
            await session.cancel_response()
            _, done = await log.wait_type(ResponseDone, response_id=response_id)
            assert done.status.value == "cancelled"
            assert session.replies.core.idle_armed
            clock.advance(30.0)
            await log.wait_type(InputTimeoutTriggered)

    run(main(), 20)


def test_a_barge_in_does_not_arm_the_idle_timeout(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("A long story begins here and goes on for a very long time.")]), turn=FakeTurn(0.1))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(), clock) as (session, log):
            session.update(**idle_config(2000))
            await session.add_text("Tell me a story.")
            response_id = await session.create_response()
            await speak(session, 320)
            _, done = await log.wait_type(ResponseDone, response_id=response_id)
            assert done.status.value == "cancelled"
            assert not session.replies.core.idle_armed  # the user is speaking

    run(main(), 20)
