"""The conversation core as a table: inputs in, effects out; no event loop, no threads, a virtual clock.

Each effect is written as a short string (:func:`show`): ``emit:EventName``, ``release``,
``answer``, ``arm``/``disarm`` (the idle timeout), ``mcp:TOOL``, ``cancel_mcp``, ``timer``,
``report:STATUS``, ``completed``, ``first_audio:MS``, ``barge_in``, ``prefill:TEXT``, ``pause`` (playout),
``resume``/``unpause`` (playout goes on: the reply resumed / was cut), ``arm_resume``."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from voiceagent.clock import VirtualClock
from voiceagent.config import Config
from voiceagent.conversation.catalog import ToolBox
from voiceagent.conversation.core import ConversationCore
from voiceagent.conversation.effects import (
    ArmIdle,
    ArmResume,
    CancelMcpCalls,
    Completed,
    CountBargeIn,
    DisarmIdle,
    Effect,
    Emit,
    FirstAudio,
    PausePlayout,
    Prefill,
    Release,
    Report,
    ResumePlayout,
    RunMcpCall,
    StartAnswer,
    StartTimer,
    TurnEnded,
)
from voiceagent.conversation.history import History
from voiceagent.conversation.reply import ReplyState, ResponseOptions
from voiceagent.conversation.verdict import InterruptionPolicy
from voiceagent.errors import ProtocolError
from voiceagent.events import (
    AudioDelta,
    GenerationEnd,
    Mark,
    McpCallDone,
    PlaybackCleared,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    SpeechStarted,
    SpeechStopped,
    ToolCallMade,
    TranscriptDelta,
    TurnConfirmed,
)
from voiceagent.pipeline import GenerationScope
from voiceagent.settings import SessionSettings, TurnDetection, settings_from_config
from voiceagent.tools.builtin import BuiltinTools
from voiceagent.tools.mcp import McpTool
from voiceagent.tools.spec import Tool


def show(effects: Sequence[Effect]) -> list[str]:
    out: list[str] = []
    for fx in effects:
        if isinstance(fx, Emit):
            out.append(f"emit:{type(fx.event).__name__}")
        elif isinstance(fx, Release):
            out.append("release")
        elif isinstance(fx, StartAnswer):
            out.append("answer")
        elif isinstance(fx, ArmIdle):
            out.append("arm")
        elif isinstance(fx, DisarmIdle):
            out.append("disarm")
        elif isinstance(fx, RunMcpCall):
            out.append(f"mcp:{fx.tool.tool.name}")
        elif isinstance(fx, CancelMcpCalls):
            out.append("cancel_mcp")
        elif isinstance(fx, StartTimer):
            out.append("timer")
        elif isinstance(fx, Report):
            out.append(f"report:{fx.status.value}")
        elif isinstance(fx, Completed):
            out.append("completed")
        elif isinstance(fx, CountBargeIn):
            out.append("barge_in")
        elif isinstance(fx, FirstAudio):
            out.append(f"first_audio:{fx.latency_ms}")
        elif isinstance(fx, Prefill):
            out.append(f"prefill:{fx.text}")
        elif isinstance(fx, PausePlayout):
            out.append("pause")
        elif isinstance(fx, ResumePlayout):
            out.append("resume" if fx.resumed else "unpause")
        elif isinstance(fx, ArmResume):
            out.append("arm_resume")
        else:  # pragma: no cover - every effect is named above
            raise AssertionError(fx)
    return out


def emitted(effects: Sequence[Effect], kind: type[Any]) -> list[Any]:
    return [fx.event for fx in effects if isinstance(fx, Emit) and isinstance(fx.event, kind)]


class FakeMcp:
    """The MCP servers' lookup: one tool, ``lookup``, on server ``docs``."""

    def __init__(self) -> None:
        self.tool = McpTool("docs", Tool("lookup"), {"type": "object"})

    def tools(self) -> tuple[McpTool, ...]:
        return (self.tool,)

    def find(self, name: str) -> McpTool | None:
        return self.tool if name == "lookup" else None


@dataclasses.dataclass
class Host:
    settings: SessionSettings


class World:
    """One core with its history, settings and clock."""

    def __init__(self, *, idle_ms: int | None = None, interrupt: bool = True, mcp: bool = False, interruption: str = "words") -> None:
        config = Config()
        config = dataclasses.replace(config, turn=dataclasses.replace(config.turn, interruption=interruption))
        self.clock = VirtualClock(100.0)
        detection = TurnDetection(0.5, 96, 320, interrupt_response=interrupt, idle_timeout_ms=idle_ms)
        self.host = Host(dataclasses.replace(settings_from_config(config), turn_detection=detection))
        self.history = History()
        builtin = BuiltinTools(lambda: dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC))
        toolbox = ToolBox(FakeMcp() if mcp else _NoMcp(), builtin)  # type: ignore[arg-type]
        self.core = ConversationCore("sess_t", self.clock, config, self.history, self.host, toolbox, GenerationScope())

    def ev(self, cls: type[Any], **fields: Any) -> Any:
        return cls(t=self.clock.now(), gen=fields.pop("gen", self.core.generations.current), session="sess_t", **fields)

    def turn(self, text: str = "hello", *, respond: bool = True) -> list[Effect]:
        """The user speaks and the turn stage confirms the turn (a new generation answers it)."""
        effects = self.core.handle(self.ev(SpeechStarted, audio_ms=0.0))
        gen = self.core.begin() if respond else 0
        confirmed = self.ev(TurnConfirmed, gen=gen, text=text, audio_end_ms=800.0, respond=respond, marks={})
        return effects + self.core.handle(TurnEnded(confirmed, speech_end_t=self.clock.now()))

    def end(self, status: ResponseStatus = ResponseStatus.COMPLETED) -> list[Effect]:
        return self.core.handle(self.ev(GenerationEnd, text="", status=status))

    def audio(self, ms: float) -> list[Effect]:
        pcm = np.zeros(int(24 * ms), dtype=np.int16)
        return self.core.handle(self.ev(AudioDelta, response_id="r", item_id="i", pcm=pcm, rate=24000, offset_ms=0.0))

    def call(self, name: str, arguments: str = "{}") -> list[Effect]:
        return self.core.handle(self.ev(ToolCallMade, call_id=f"call_{name}", name=name, arguments=arguments))


class _NoMcp:
    def tools(self) -> tuple[McpTool, ...]:
        return ()

    def find(self, name: str) -> McpTool | None:
        return None


def test_a_confirmed_turn_commits_the_user_item_and_releases_its_answer() -> None:
    w = World()
    assert show(w.turn()) == [
        "emit:InputSpeechStarted",
        "emit:InputSpeechStopped",
        "emit:InputCommitted",
        "emit:InputTranscriptDone",
        "emit:ResponseCreated",
        "release",
    ]
    assert w.core.active_response_id is not None and w.core.agent_audible()
    assert [i.role for i in w.history.items] == ["user", "assistant"]


def test_a_turn_that_is_not_answered_commits_only() -> None:
    w = World()
    assert show(w.turn(respond=False)) == [
        "emit:InputSpeechStarted",
        "emit:InputSpeechStopped",
        "emit:InputCommitted",
        "emit:InputTranscriptDone",
    ]
    assert w.core.active_response_id is None


def test_a_partial_transcript_goes_to_the_client_and_prefills_the_answer() -> None:
    w = World()
    w.core.handle(w.ev(SpeechStarted, audio_ms=0.0))
    assert show(w.core.handle(w.ev(TranscriptDelta, text="what is"))) == ["emit:InputTranscriptDelta", "prefill:what is"]
    w.host.settings = dataclasses.replace(w.host.settings, kind="transcription")
    assert show(w.core.handle(w.ev(TranscriptDelta, text="the time"))) == ["emit:InputTranscriptDelta"]


@pytest.mark.parametrize(
    ("interrupt", "expected"),
    [
        (True, ["emit:InputSpeechStarted", "barge_in", "emit:PlaybackCleared"]),  # already done: cut, not ended again
        (False, ["emit:InputSpeechStarted"]),
    ],
)
def test_speech_over_an_audible_reply_barges_in_unless_interrupt_response_is_off(interrupt: bool, expected: list[str]) -> None:
    w = World(interrupt=interrupt, interruption="immediate")
    w.turn()
    [reply] = w.core.live().values()
    reply.listener.schedule(w.clock.now(), 1.0)  # playout sent a second of audio: heard until 101.0
    w.audio(1000.0)
    w.end()  # all sent: the response is done, the listener still hears it
    w.clock.advance(0.5)
    effects = w.core.handle(w.ev(SpeechStarted, audio_ms=2000.0))
    assert show(effects) == expected
    if interrupt:
        [cleared] = emitted(effects, PlaybackCleared)
        assert cleared.heard_ms == pytest.approx(500.0) and reply.item is not None and reply.item.heard_ms == pytest.approx(500.0)


def test_a_reply_heard_to_its_end_is_not_barged_in() -> None:
    w = World()
    w.turn()
    w.end()
    # Nothing was sent: nothing is audible once the generation ended.
    assert show(w.core.handle(w.ev(SpeechStarted, audio_ms=2000.0))) == ["emit:InputSpeechStarted"]


def test_a_completed_reply_reports_arms_the_idle_timeout_and_feeds_the_cache() -> None:
    w = World(idle_ms=2000)
    w.turn()
    w.audio(500.0)
    effects = w.end()
    assert show(effects) == ["emit:ResponseDone", "report:completed", "arm", "completed"]
    assert w.core.active_response_id is None and w.core.idle_armed


def test_a_replys_first_audio_is_told_once_with_its_latency_from_the_end_of_speech() -> None:
    """The server counts a turn for its admission by load at its first audio, not when the reply
    ends; a reply that answers no speech (``response.create``) has no latency to tell."""
    w = World()
    w.turn()
    w.clock.advance(0.6)
    assert show(w.audio(200.0)) == ["first_audio:600.0", "emit:AudioDelta"]
    w.clock.advance(0.2)
    assert show(w.audio(200.0)) == ["emit:AudioDelta"]
    w.end()
    w.core.create_response(ResponseOptions())
    assert show(w.audio(200.0)) == ["first_audio:None", "emit:AudioDelta"]


def test_audio_of_a_stale_generation_is_dropped() -> None:
    w = World()
    w.turn()
    stale = w.core.generations.current
    w.core.begin()
    assert (
        w.core.handle(w.ev(AudioDelta, gen=stale, response_id="r", item_id="i", pcm=np.zeros(240, np.int16), rate=24000, offset_ms=0)) == []
    )
    assert not w.core.spoke


def test_a_withdrawn_speculation_leaves_nothing_behind() -> None:
    w = World()
    gen = w.core.begin()
    w.core.handle(w.ev(Mark, gen=gen, name="llm_first_token"))
    assert list(w.core.live()) == [gen]
    w.core.retract(gen)
    assert w.core.live() == {}


def test_response_create_is_refused_while_one_is_active_and_in_a_transcription_session() -> None:
    w = World()
    _, effects = w.core.create_response(ResponseOptions())
    assert show(effects) == ["emit:ResponseCreated", "release", "answer"]
    with pytest.raises(ProtocolError) as busy:
        w.core.create_response(ResponseOptions())
    assert busy.value.code == "conversation_already_has_active_response"
    w.end()
    w.host.settings = dataclasses.replace(w.host.settings, kind="transcription")
    with pytest.raises(ProtocolError) as transcribing:
        w.core.create_response(ResponseOptions())
    assert transcribing.value.code == "invalid_state"
    assert w.core.active_response_id is None


def test_an_out_of_band_response_stays_out_of_the_history() -> None:
    w = World(idle_ms=2000)
    _, effects = w.core.create_response(ResponseOptions(out_of_band=True, metadata={"k": "v"}))
    [created] = emitted(effects, ResponseCreated)
    assert not created.in_conversation and created.metadata == {"k": "v"} and w.history.items == []
    assert show(w.end()) == ["emit:ResponseDone", "report:completed", "arm"]  # not cached


def test_cancel_stop_and_clear_end_the_active_response_once() -> None:
    w = World()
    assert w.core.cancel_response() == (False, [])
    w.core.create_response(ResponseOptions())
    stopped, effects = w.core.cancel_response()
    assert stopped and show(effects) == ["barge_in", "emit:PlaybackCleared", "emit:ResponseDone", "report:cancelled"]
    assert w.core.cancel_response() == (False, [])
    [cleared] = emitted(w.core.clear_output(), PlaybackCleared)
    assert cleared.response_id == ""  # nothing was playing
    reply_id, _ = w.core.create_response(ResponseOptions())
    item_id = w.core.live()[w.core.generations.current].item_id
    assert w.core.stop_item("item_other") == (False, [])
    stopped, effects = w.core.stop_item(item_id)
    assert stopped and show(effects) == ["emit:ResponseDone", "report:cancelled"]
    assert emitted(effects, ResponseDone)[0].response_id == reply_id


def test_the_idle_timeout_commits_silence_and_asks_the_user_to_go_on() -> None:
    w = World(idle_ms=2000)
    [arm] = w.core.settings_changed()
    assert isinstance(arm, ArmIdle) and arm.deadline == pytest.approx(102.0)
    w.clock.advance(2.0)
    assert w.core.idle_due(arm.token - 1, 2000.0) == []  # an older timeout: stale
    effects = w.core.idle_due(arm.token, 2000.0)
    assert show(effects) == ["emit:InputTimeoutTriggered", "emit:InputCommitted", "emit:ResponseCreated", "release", "answer"]
    assert w.history.items[0].role == "user" and not w.core.idle_armed
    assert w.core.idle_due(arm.token, 2000.0) == []  # fired once


def test_speech_disarms_the_idle_timeout_and_its_due_does_nothing() -> None:
    w = World(idle_ms=2000)
    [arm] = w.core.settings_changed()
    assert show(w.core.handle(w.ev(SpeechStarted, audio_ms=0.0))) == ["disarm", "emit:InputSpeechStarted"]
    assert isinstance(arm, ArmIdle) and w.core.idle_due(arm.token, 0.0) == []


def test_a_built_in_tool_runs_here_and_its_answer_follows_the_reply() -> None:
    w = World()
    w.turn("what time is it")
    assert show(w.call("get_time")) == ["emit:FunctionCallAdded", "emit:ToolOutputAdded"]
    first = w.core.active_response_id
    effects = w.end()
    assert show(effects) == ["emit:ResponseDone", "report:completed", "completed", "emit:ResponseCreated", "release", "answer"]
    [sequel] = [w.core.options(g) for g in w.core.live()]
    assert sequel is not None and sequel.tool_choice == "none"
    assert w.core.active_response_id not in (None, first)


def test_a_timer_due_during_a_response_is_announced_after_it() -> None:
    w = World()
    w.turn("remind me in a minute")
    [timer] = [fx for fx in w.call("set_timer", '{"seconds": 60, "label": "tea"}') if isinstance(fx, StartTimer)]
    w.end()  # the answer from the tool is now active
    assert w.core.timer_due(timer.timer) == []
    effects = w.end()
    assert show(effects)[-3:] == ["emit:ResponseCreated", "release", "answer"]
    options = w.core.options(w.core.generations.current)
    assert options is not None and options.instructions is not None and "tea" in options.instructions


def test_a_speculative_answers_call_is_held_until_release() -> None:
    w = World()
    gen = w.core.begin()
    assert w.core.handle(w.ev(ToolCallMade, gen=gen, call_id="c1", name="get_weather", arguments="{}")) == []
    confirmed = w.ev(TurnConfirmed, gen=gen, text="weather?", audio_end_ms=800.0, respond=True, marks={})
    assert show(w.core.handle(TurnEnded(confirmed, w.clock.now())))[-2:] == ["release", "emit:FunctionCallAdded"]
    assert not w.core.may_speculate()  # the client runs it: its output comes next
    item_id, effects = w.core.add_tool_output("c1", '{"t": 18}')
    assert show(effects) == ["emit:ToolOutputAdded"] and w.core.may_speculate() and w.history.find(item_id) is not None
    with pytest.raises(ProtocolError) as again:
        w.core.add_tool_output("c1", "{}")
    assert again.value.code == "tool_output_already_received"


def test_an_mcp_call_keeps_its_response_open_until_its_result() -> None:
    w = World(mcp=True)
    w.turn("look it up")
    assert show(w.call("lookup", '{"q": "x"}')) == ["emit:McpCallAdded", "mcp:lookup"]
    assert w.end() == []  # the generation ended; the response waits for its call
    [reply] = w.core.live().values()
    assert reply.state is ReplyState.ENDING and w.core.active_response_id == reply.id
    effects = w.core.mcp_call_ended(reply.mcp_items[0].id, "found it", None)
    assert show(effects) == [
        "emit:McpCallDone",
        "emit:ResponseDone",
        "report:completed",
        "completed",
        "emit:ResponseCreated",
        "release",
        "answer",
    ]
    assert w.core.mcp_call_ended(reply.mcp_items[0].id, "again", None) == []  # told once


def test_a_barge_in_cancels_a_running_mcp_call_before_its_response_ends() -> None:
    w = World(mcp=True, interruption="immediate")
    w.turn("look it up")
    w.call("lookup")
    [reply] = w.core.live().values()
    effects = w.core.handle(w.ev(SpeechStarted, audio_ms=2000.0))
    assert show(effects) == [
        "emit:InputSpeechStarted",
        "barge_in",
        "emit:PlaybackCleared",
        "cancel_mcp",
        "emit:McpCallDone",
        "emit:ResponseDone",
        "report:cancelled",
    ]
    [done] = emitted(effects, McpCallDone)
    assert done.error is not None and str(done.error["message"]).startswith("cancelled")
    assert w.core.mcp_call_ended(reply.mcp_items[0].id, "late", None) == []  # the late result is dropped


def test_a_failed_mcp_call_is_an_error_and_its_answer_apologises() -> None:
    w = World(mcp=True)
    w.turn("look it up")
    w.call("lookup")
    w.end()
    [reply] = w.core.live().values()
    effects = w.core.mcp_call_ended(reply.mcp_items[0].id, None, {"type": "tool_execution_error", "message": "down"})
    assert show(effects)[:2] == ["emit:ErrorEvent", "emit:McpCallDone"]
    options = w.core.options(w.core.generations.current)
    assert options is not None and options.instructions is not None and "lookup" in options.instructions


# ---------------------------------------------------------------------------- interruptions judged by their words


def speaking_reply(w: World, sent_s: float = 3.0) -> Any:
    """A reply of which playout has sent ``sent_s`` of audio, one second of it heard."""
    w.turn("tell me a story")
    [reply] = w.core.live().values()
    reply.listener.schedule(w.clock.now(), sent_s)
    w.audio(1000.0 * sent_s)
    w.clock.advance(1.0)
    return reply


def test_speech_over_a_reply_pauses_it_and_a_backchannel_resumes_it_whole() -> None:
    w = World()
    reply = speaking_reply(w)
    gen = w.core.generations.current
    w.core.segment_heard("tell me a story", -20.0)  # the user's own turn: their voice's level
    # The client hears nothing of the speech yet; only playout pauses.
    assert show(w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))) == ["pause"]
    assert w.core.floor.judging() and w.core.generations.current == gen
    assert show(w.core.handle(w.ev(TranscriptDelta, text="Yeah,", level_db=-21.0))) == []  # held
    assert show(w.core.handle(w.ev(SpeechStopped, audio_ms=5600.0))) == ["arm_resume"]
    w.clock.advance(0.3)  # the final transcript comes after a little silence
    takes, effects = w.core.segment_heard("Yeah, yeah. Right.", -21.0)
    assert not takes and show(effects) == ["resume"]
    # The reply goes on, whole: nothing was cut, no generation moved, no user item.
    assert not w.core.floor.judging() and w.core.generations.current == gen and w.core.active_response_id == reply.id
    assert reply.item is not None and reply.item.heard_ms is None
    assert [i.role for i in w.history.items] == ["user", "assistant"]


@pytest.mark.parametrize("text", ["Wait, stop.", "No, I meant Paris.", "yeah but what about Rome"])
def test_real_words_over_a_paused_reply_cut_it_as_a_barge_in(text: str) -> None:
    w = World()
    reply = speaking_reply(w)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
    w.clock.advance(0.5)  # the pause: the listener's buffer plays on meanwhile
    w.core.handle(w.ev(SpeechStopped, audio_ms=5700.0))
    takes, effects = w.core.segment_heard(text, -20.0)
    assert takes
    # The client learns of the speech now (with its real start), then the reply is cut.
    cut = ["unpause", "emit:InputSpeechStarted", "barge_in", "emit:PlaybackCleared", "emit:ResponseDone", "report:cancelled"]
    assert show(effects) == cut
    [started] = [fx.event for fx in effects if isinstance(fx, Emit) and type(fx.event).__name__ == "InputSpeechStarted"]
    assert started.audio_ms == 5000.0
    [cleared] = emitted(effects, PlaybackCleared)
    assert cleared.heard_ms == pytest.approx(1500.0) and reply.item is not None and reply.item.heard_ms == pytest.approx(1500.0)
    assert not w.core.floor.judging() and w.core.active_response_id is None


def test_a_partial_decides_once_the_speech_has_lasted_a_second_and_the_held_partials_follow_in_order() -> None:
    w = World()
    speaking_reply(w)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
    assert show(w.core.handle(w.ev(TranscriptDelta, text="Uh-huh", audio_ms=5500.0))) == []
    # Real words, but from half a second of speech: Whisper's guess at a fragment does not decide.
    assert show(w.core.handle(w.ev(TranscriptDelta, text="Uh-huh, garden", audio_ms=5600.0))) == []
    effects = w.core.handle(w.ev(TranscriptDelta, text="Uh-huh, no wait", audio_ms=6000.0))
    assert show(effects)[:8] == [
        "unpause",
        "emit:InputSpeechStarted",
        "emit:InputTranscriptDelta",
        "prefill:Uh-huh",
        "emit:InputTranscriptDelta",
        "prefill:Uh-huh, garden",
        "emit:InputTranscriptDelta",
        "prefill:Uh-huh, no wait",
    ]
    assert "barge_in" in show(effects) and not w.core.floor.judging()
    # The segment's final then counts as an ordinary turn.
    assert w.core.segment_heard("Uh-huh, no wait.", -20.0) == (True, [])


def test_a_doubted_word_resumes_the_reply_and_the_same_word_heard_clearly_cuts_it() -> None:
    min_confidence = InterruptionPolicy.from_config(Config().turn).min_confidence
    for confidence, cut in ((min_confidence / 3, False), (0.9, True)):
        w = World()
        reply = speaking_reply(w)
        w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
        w.core.handle(w.ev(SpeechStopped, audio_ms=5400.0))
        w.clock.advance(0.3)
        takes, effects = w.core.segment_heard("Two.", -20.0, confidence)
        assert takes is cut
        if cut:
            assert "barge_in" in show(effects) and w.core.active_response_id is None
        else:  # a sneeze Whisper wrote as "2.": the reply goes on, whole
            assert show(effects) == ["resume"] and w.core.active_response_id == reply.id
            assert reply.item is not None and reply.item.heard_ms is None


def test_no_words_resume_after_the_timeout_but_never_while_the_user_speaks() -> None:
    w = World()
    reply = speaking_reply(w)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
    [arm] = w.core.handle(w.ev(SpeechStopped, audio_ms=5400.0))
    assert isinstance(arm, ArmResume) and arm.deadline == pytest.approx(w.clock.now() + 1.0)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5600.0))  # they speak again: that timeout is stale
    assert w.core.resume_due(arm.token) == [] and w.core.floor.judging()
    # A cough's segment while they still speak: dropped, but no resume yet.
    assert w.core.segment_heard("", -25.0) == (False, [])
    [arm2] = w.core.handle(w.ev(SpeechStopped, audio_ms=6000.0))
    assert show(w.core.resume_due(arm2.token)) == ["resume"]
    assert w.core.active_response_id == reply.id and reply.item is not None and reply.item.heard_ms is None


def two_stretches(w: World, second_end_ms: float) -> ArmResume:
    """Speech over the reply from 5.0 to 5.8 s, and again from 6.2 s to ``second_end_ms``, both
    ended by the VAD before any transcript: the resume armed at the second's end."""
    w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
    w.core.handle(w.ev(SpeechStopped, audio_ms=5800.0))
    w.core.handle(w.ev(SpeechStarted, audio_ms=6200.0))
    [arm] = w.core.handle(w.ev(SpeechStopped, audio_ms=second_end_ms))
    assert isinstance(arm, ArmResume)
    return arm


def test_a_dismissed_segment_keeps_the_pause_while_later_speech_awaits_its_words() -> None:
    # "Yeah, yeah. Right." on a busy machine: the VAD has ended both stretches before the first
    # one's transcript is in.  The reply stays paused for the second one's words.
    w = World()
    reply = speaking_reply(w)
    arm = two_stretches(w, 6600.0)
    w.clock.advance(0.5)
    assert w.core.segment_heard("Yeah, yeah.", -21.0, None, None, 5896.0) == (False, [])  # no resume yet
    assert w.core.floor.judging()
    takes, effects = w.core.segment_heard("Right.", -21.0, None, None, 6696.0)
    assert not takes and show(effects) == ["resume"]
    assert w.core.active_response_id == reply.id and reply.item is not None and reply.item.heard_ms is None
    assert w.core.resume_due(arm.token) == []  # the timeout finds nothing left to resume


@pytest.mark.parametrize(("late", "cuts"), [("What is the capital of France?", True), ("Right.", False)])
def test_words_that_come_after_the_timeout_resumed_the_reply_are_still_judged(late: str, cuts: bool) -> None:
    w = World()
    reply = speaking_reply(w)
    arm = two_stretches(w, 7600.0)
    w.clock.advance(0.2)
    assert w.core.segment_heard("Yeah, yeah.", -21.0, None, None, 5896.0) == (False, [])
    w.clock.advance(0.9)
    assert show(w.core.resume_due(arm.token)) == ["resume"]  # the transcriber is late: the reply goes on
    assert not w.core.floor.judging()
    takes, effects = w.core.segment_heard(late, -21.0, 0.9, None, 7696.0)
    assert takes is cuts
    if cuts:  # an interruption after all: the client hears of the speech, the reply is cut
        assert show(effects) == ["emit:InputSpeechStarted", "barge_in", "emit:PlaybackCleared", "emit:ResponseDone", "report:cancelled"]
        assert reply.item is not None and reply.item.heard_ms is not None and w.core.active_response_id is None
    else:  # a backchannel: dropped, the reply plays on whole
        assert effects == [] and w.core.active_response_id == reply.id
        assert reply.item is not None and reply.item.heard_ms is None
    # Judged once: the next segment is the user's own.
    assert w.core.segment_heard("Right.", -21.0, None, None, 9000.0) == (True, [])


def test_a_turn_that_supersedes_a_reply_still_playing_cuts_it() -> None:
    # Speech over the agent that the core never judged (here: barge-in is off) makes a turn: the
    # reply it ends is cut to what was heard and the client told to clear its buffer.
    w = World(interrupt=False)
    reply = speaking_reply(w)
    assert show(w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))) == ["emit:InputSpeechStarted"]
    effects = w.turn("and what else?")
    shown = show(effects)
    assert "barge_in" in shown and shown.index("emit:PlaybackCleared") < shown.index("emit:ResponseDone"), shown
    assert reply.item is not None and reply.item.heard_ms == pytest.approx(1000.0)


def test_a_quieter_voice_is_background_not_an_interruption() -> None:
    w = World()
    speaking_reply(w)
    w.core.segment_heard("tell me a story", -20.0)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
    w.core.handle(w.ev(SpeechStopped, audio_ms=6000.0))
    w.clock.advance(0.3)
    assert show(w.core.segment_heard("and now the weather for the weekend", -34.0)[1]) == ["resume"]
    # At the user's own level the same words interrupt.
    w.core.handle(w.ev(SpeechStarted, audio_ms=7000.0))
    w.core.handle(w.ev(SpeechStopped, audio_ms=8000.0))
    takes, effects = w.core.segment_heard("and now the weather for the weekend", -22.0)
    assert takes and "barge_in" in show(effects)


def test_a_cancel_during_the_pause_ends_it_and_the_speech_is_the_users() -> None:
    w = World()
    speaking_reply(w)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
    stopped, effects = w.core.cancel_response()
    assert stopped and show(effects)[:2] == ["unpause", "emit:InputSpeechStarted"]
    assert not w.core.floor.judging()
    assert w.core.segment_heard("yeah", -20.0) == (True, [])  # no longer judged: an ordinary turn


def test_speech_over_a_silent_agent_is_an_ordinary_turn_in_words_mode() -> None:
    w = World()
    w.turn()
    w.end()
    assert show(w.core.handle(w.ev(SpeechStarted, audio_ms=2000.0))) == ["emit:InputSpeechStarted"]
    assert w.core.segment_heard("yeah", -20.0) == (True, [])


def test_a_backchannel_decided_at_once_waits_for_a_little_silence_so_yeah_but_stays_paused() -> None:
    w = World()
    speaking_reply(w)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
    w.core.handle(w.ev(SpeechStopped, audio_ms=5300.0))
    w.clock.advance(0.1)
    takes, effects = w.core.segment_heard("Yeah,", -20.0)  # decided 0.1 s after the speech ended
    [arm] = effects
    assert not takes and isinstance(arm, ArmResume) and arm.deadline == pytest.approx(w.clock.now() + 0.2)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5500.0))  # "... but what about the princess?"
    assert w.core.resume_due(arm.token) == [] and w.core.floor.judging()
    w.core.handle(w.ev(SpeechStopped, audio_ms=7000.0))
    takes, effects = w.core.segment_heard("but what about the princess?", -20.0)
    assert takes and "barge_in" in show(effects)


def test_interrupt_response_false_keeps_its_meaning_in_words_mode() -> None:
    w = World(interrupt=False)
    speaking_reply(w)
    # No pause, nothing judged: the speech is the user's next turn, the reply goes on meanwhile.
    assert show(w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))) == ["emit:InputSpeechStarted"]
    assert not w.core.floor.judging() and w.core.segment_heard("yeah", -20.0) == (True, [])


def test_words_read_as_sounds_resume_the_reply_and_a_partial_of_them_does_not_decide() -> None:
    w = World()
    reply = speaking_reply(w)
    w.core.segment_heard("tell me a story", -20.0)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
    # A hum-laugh's partial after more than a second: real words, but a second reading could
    # dismiss them, so it waits for the final transcript (which gets that reading).
    assert show(w.core.handle(w.ev(TranscriptDelta, text="and mam", audio_ms=6200.0))) == []
    assert w.core.floor.judging() and w.core.floor.reads_again("and mamam", -20.0, 0.4)
    w.core.handle(w.ev(SpeechStopped, audio_ms=6400.0))
    w.clock.advance(0.3)
    within = -Config().turn.interruption_sound_margin / 2
    takes, effects = w.core.segment_heard("and mamam", -20.0, 0.4, within)
    assert not takes and show(effects) == ["resume"]
    assert w.core.active_response_id == reply.id and reply.item is not None and reply.item.heard_ms is None
    assert not w.core.floor.reads_again("and mamam", -20.0, 0.4)  # nothing judged now: an ordinary turn


def test_words_that_read_badly_as_sounds_cut_the_reply_and_a_floor_word_partial_still_decides() -> None:
    w = World()
    speaking_reply(w)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
    w.core.handle(w.ev(SpeechStopped, audio_ms=6000.0))
    takes, effects = w.core.segment_heard("Can you tell me a joke?", -20.0, 0.6, -24.8)
    assert takes and "barge_in" in show(effects)
    w = World()
    speaking_reply(w)
    w.core.handle(w.ev(SpeechStarted, audio_ms=5000.0))
    assert not w.core.floor.reads_again("Hold on, please", -20.0, 0.4)
    assert "barge_in" in show(w.core.handle(w.ev(TranscriptDelta, text="Hold on, please", audio_ms=6100.0)))
