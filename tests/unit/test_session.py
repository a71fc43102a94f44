"""voiceagent.session end to end with scripted fake backends (no models, no sockets).

The session runs on a :class:`VirtualClock`: playout paces audio on it, so what the listener has
"heard" moves only when a test advances it.  Durations are multiples of 125 ms (exact in binary)
so that pacing deadlines compare exactly.  Speech is made with loud frames and pauses with zeros
(see :class:`tests.unit.fakes.FakeVad`); every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from voiceagent.backends.protocols import LlmRequest, Transcript, example_messages
from voiceagent.capacity import TurnCost
from voiceagent.clock import VirtualClock
from voiceagent.config import DEFAULT_EXAMPLES, Config, LlmConfig, PlayoutConfig, SttConfig, TurnConfig, VadConfig, parse_examples
from voiceagent.conversation.history import AssistantItem, UserItem
from voiceagent.conversation.interruption import RESUME_SILENCE_S
from voiceagent.conversation.reply import ResponseOptions
from voiceagent.errors import ProtocolError
from voiceagent.events import (
    AudioDelta,
    ErrorEvent,
    InputCleared,
    InputCommitted,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscriptDelta,
    InputTranscriptDone,
    InputTranscriptFailed,
    ItemTruncated,
    OutputTranscriptDelta,
    PlaybackCleared,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    TextItemAdded,
    TurnMetrics,
)
from voiceagent.observability.metrics import MARKS
from voiceagent.pipeline.scheduler import PriorityExecutor
from voiceagent.session import Session
from voiceagent.stages.stt import PRIORITY_FINAL
from voiceagent.tools.spec import Message, Tool, ToolCall

from .fakes import (
    EventLog,
    FakeEngines,
    FakeLlm,
    FakeSound,
    FakeSoundStt,
    FakeStt,
    FakeTts,
    FakeTurn,
    Recorder,
    SequenceCheckingLlm,
    deadline,
    pause,
    speak,
    until,
)

Run = Callable[..., Any]
MakeFakes = Callable[..., FakeEngines]

CHUNK_S = 0.125  # playout chunk and fake TTS word length
INSTRUCTIONS = Config().llm.instructions
# The head of every prompt of a session on the default config: the instructions (and the reply
# examples, none by default).
PROMPT_HEAD = (Message("system", INSTRUCTIONS), *example_messages(Config().llm.example_pairs))


def make_config(
    *,
    lead_ms: int = 2000,
    silence_ms: int = 320,
    complete_ms: int = 160,
    partials: bool = False,
    interruption: str = "immediate",
    call_check: bool = False,
) -> Config:
    """``interruption``: ``immediate`` by default here, so the fakes' wordless speech barges in
    (the ``words`` mode has its own tests).  ``call_check``: off by default here, so a scripted
    engine's replies go to the turns they are written for (the check has its own tests)."""
    return Config(
        llm=LlmConfig(call_check=call_check),
        vad=VadConfig(min_speech_ms=64, stop_ms=96, barge_in_ms=96, prefix_padding_ms=96),
        stt=SttConfig(partials=partials, partial_interval_ms=200),
        turn=TurnConfig(silence_ms=silence_ms, complete_ms=complete_ms, threshold=0.5, speculative=True, interruption=interruption),
        playout=PlayoutConfig(lead_ms=lead_ms, chunk_ms=125),
    )


@pytest.fixture
def make_fakes() -> Iterator[MakeFakes]:
    made: list[FakeEngines] = []

    def make(**kwargs: Any) -> FakeEngines:
        fakes = FakeEngines(**kwargs)
        made.append(fakes)
        return fakes

    yield make
    for fakes in made:
        fakes.close()


@contextlib.asynccontextmanager
async def running(
    fakes: FakeEngines, config: Config, clock: VirtualClock | None = None, session_id: str = "sess_test"
) -> AsyncIterator[tuple[Session, EventLog]]:
    session = Session(fakes.engines, config, clock=clock or VirtualClock(), session_id=session_id)
    await session.start()
    log = EventLog(session)
    log.start()
    try:
        yield session, log
    finally:
        await session.aclose()
        await log.finished()


async def say_turn(session: Session, speech_ms: float = 320, silence_ms: float = 640) -> None:
    """Speak, then stay silent long enough for any turn to be confirmed."""
    await speak(session, speech_ms)
    await pause(session, silence_ms)


async def say_in_two_parts(session: Session, log: EventLog, gap_ms: float) -> InputTranscriptDone:
    """Speak, pause ``gap_ms``, speak again, stay silent until any turn is confirmed; returns
    the first transcript done, once the response to it is done."""
    await speak(session, 320)
    await pause(session, gap_ms)
    await speak(session, 320)
    await pause(session, 1200)
    _, transcript = await log.wait_type(InputTranscriptDone)
    await log.wait_type(ResponseDone)
    return transcript


def tokens(text: str) -> list[str]:
    """Word-by-word pieces, as an LLM streams them."""
    words = text.split(" ")
    return [words[0]] + [" " + w for w in words[1:]]


def assert_in_order(log: EventLog, *indices: int) -> None:
    assert list(indices) == sorted(indices), log.describe()


# --------------------------------------------------------------------------- (a) a plain turn


def test_speech_then_silence_gets_an_answer(run: Run, make_fakes: MakeFakes) -> None:
    reply = "It is sunny. Take a hat."
    fakes = make_fakes(stt=FakeStt(["what is the weather"]), llm=FakeLlm([tokens(reply)]), turn=FakeTurn(0.9))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await pause(session, 160)
            await say_turn(session)
            i_done, done = await log.wait_type(ResponseDone)
            i_start, started = await log.wait_type(InputSpeechStarted)
            i_stop, stopped = await log.wait_type(InputSpeechStopped)
            i_commit, committed = await log.wait_type(InputCommitted)
            i_text, transcript = await log.wait_type(InputTranscriptDone)
            i_created, created = await log.wait_type(ResponseCreated)
            i_words, _ = await log.wait_type(OutputTranscriptDelta)
            i_audio, _ = await log.wait_type(AudioDelta)
            assert_in_order(log, i_start, i_stop, i_commit, i_text, i_created, i_words, i_audio, i_done)

            # the user item: speech from 160 ms (after 5 quiet windows) to 480 ms
            assert started.audio_ms == 160.0
            assert stopped.audio_ms == 480.0
            assert committed.item_id == started.item_id == stopped.item_id == transcript.item_id
            assert committed.previous_item_id is None
            assert transcript.text == "what is the weather"

            # the response
            assert created.previous_item_id == started.item_id
            assert done.status is ResponseStatus.COMPLETED
            assert (done.response_id, done.item_id) == (created.response_id, created.item_id)
            assert done.text == reply
            deltas = log.of_type(AudioDelta)
            assert all((d.response_id, d.item_id, d.rate) == (created.response_id, created.item_id, 24000) for d in deltas)
            total = sum(len(d.pcm) for d in deltas)
            assert total == fakes.tts.samples_for("It is sunny.") + fakes.tts.samples_for("Take a hat.")  # 6 words, 750 ms
            assert done.audio_ms == pytest.approx(total * 1000 / 24000)
            offsets = [d.offset_ms for d in deltas]
            expected_offsets = [sum(len(d.pcm) for d in deltas[:i]) * 1000 / 24000 for i in range(len(deltas))]
            assert offsets == pytest.approx(expected_offsets)
            assert [e.text for e in log.of_type(OutputTranscriptDelta)] == ["It is sunny. ", "Take a hat."]
            [metrics] = log.of_type(TurnMetrics)
            assert metrics.response_id == created.response_id
            assert set(metrics.spans) == set(MARKS[1:])

            # history: [user, assistant] with the right texts
            items = session.history.items
            assert [type(i) for i in items] == [UserItem, AssistantItem]
            assert (items[0].id, items[0].text) == (started.item_id, "what is the weather")
            assert isinstance(items[1], AssistantItem)
            assert (items[1].id, items[1].text, items[1].status) == (created.item_id, reply, "completed")

            # the backends were called as expected, each in its own executor
            [call] = fakes.llm.calls.items
            assert call.messages == (*PROMPT_HEAD, Message("user", "what is the weather"))
            assert fakes.tts.calls.items == ["It is sunny.", "Take a hat."]
            [stt] = fakes.stt.calls.items
            # the segment with 96 ms of prefix padding and 96 ms of tail: 64..576 ms
            assert stt.samples == 512 * 16
            assert stt.language == "en"
            assert stt.thread.startswith("fake-stt")
            assert len(fakes.turn.calls) == 1
            assert all(name.startswith("fake-vad") for name in fakes.vad.threads.items)
            assert len(log.of_type(ResponseCreated)) == 1
            assert len(log.of_type(ErrorEvent)) == 0

    run(main(), 20)


def test_partial_transcripts_while_speaking(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(respond=lambda audio: f"words {len(audio)}"))

    async def main() -> None:
        async with running(fakes, make_config(partials=True)) as (session, log):
            await pause(session, 160)
            await speak(session, 960)
            _, started = await log.wait_type(InputSpeechStarted)
            i_partial, partial = await log.wait_type(InputTranscriptDelta)
            assert partial.item_id == started.item_id
            assert partial.text.startswith("words ")
            await pause(session, 640)
            i_final, final = await log.wait_type(InputTranscriptDone)
            assert i_partial < i_final
            assert final.item_id == started.item_id
            # the final decode covers the whole segment, so it is longer than any partial
            partial_lengths = [int(p.text.split()[1]) for p in log.of_type(InputTranscriptDelta)]
            assert int(final.text.split()[1]) > max(partial_lengths)
            assert session.stt.decodes >= 2

    run(main(), 20)


def test_the_engine_learns_the_first_clause_is_complete_from_the_token_that_completes_it(run: Run, make_fakes: MakeFakes) -> None:
    """The LLM stage judges the first clause in the engine's thread too (``Pacing.piece``),
    with the same cut as the clauses it sends to TTS: urgency ends exactly with the token that
    completes the first clause."""
    fakes = make_fakes(stt=FakeStt(["what is the capital of italy"]), llm=FakeLlm([tokens("The capital of Italy is Rome, a lovely city.")]))
    seen: list[tuple[str, bool]] = []
    generate = fakes.pool.generate

    def spying(request: LlmRequest) -> Any:
        pacing = request.pacing
        inner = pacing.piece

        def piece(piece: str | ToolCall) -> None:
            inner(piece)
            seen.append((str(piece), pacing.urgent))

        pacing.piece = piece  # type: ignore[method-assign]
        return generate(request)

    fakes.pool.generate = spying  # type: ignore[method-assign]

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await pause(session, 160)
            await say_turn(session)
            await log.wait_type(ResponseDone)
            first = log.of_type(OutputTranscriptDelta)[0].text
            assert first == "The capital of Italy "
            # Urgent until the token that showed the first clause complete (" is": the fifth word
            # began), not one token later.
            assert seen[:5] == [("The", True), (" capital", True), (" of", True), (" Italy", True), (" is", False)], seen

    run(main(), 20)


@pytest.mark.parametrize("enabled", [True, False])
def test_partials_prefill_the_coming_prompt_on_the_turns_context(run: Run, make_fakes: MakeFakes, enabled: bool) -> None:
    """Each partial transcript, less its last word, is evaluated as the coming prompt's user text
    on the context the turn is then answered on (llm.prefill); off, nothing is prefilled."""
    context = SequenceCheckingLlm("ctx", pieces=2)
    fakes = make_fakes(stt=FakeStt(respond=lambda audio: f"tell me about {len(audio)} samples"), contexts=[context])
    config = make_config(partials=True)
    config = dataclasses.replace(config, llm=dataclasses.replace(config.llm, prefill=enabled))

    async def main() -> None:
        async with running(fakes, config) as (session, log):
            await pause(session, 160)
            await speak(session, 960)
            await log.wait_type(InputTranscriptDelta)
            if enabled:
                # The turn's end takes the context from a prefill that has not started (as
                # designed); the audio here comes faster than real time, so the end waits for it.
                await until(lambda: bool(context.prefills.items))
            await pause(session, 640)
            await log.wait_type(ResponseDone)
            partials = [p.text for p in log.of_type(InputTranscriptDelta)]
            prefills = context.prefills.items
            if enabled:
                assert prefills, partials
                assert set(prefills) <= {p.rsplit(" ", 1)[0] for p in partials}, (prefills, partials)
                assert session.llm.prefilled > 0
            else:
                assert prefills == [] and session.llm.prefilled == 0
            # The turn is answered from its own final transcript, on the same context, untouched.
            final = log.of_type(InputTranscriptDone)[-1].text
            assert context.prompts.items == [final]
            assert context.violations.items == []

    run(main(), 20)


def _heard_by_level(audio: Any) -> str:
    """A fake transcriber for a turn of two segments told apart by their level: the first
    (amplitude 8000) says "what is the weather", the second (16000) "like in paris today", and a
    clip holding both (the turn transcribed again as one) says both."""
    peaks = [float(abs(chunk).max()) for chunk in (audio[i : i + 160] for i in range(0, len(audio), 160)) if len(chunk)]
    first = any(0.2 < p < 0.3 for p in peaks)
    second = any(p > 0.4 for p in peaks)
    return " ".join(t for t, said in (("what is the weather", first), ("like in paris today", second)) if said)


def test_a_partial_of_a_later_segment_is_prefilled_after_the_turns_earlier_words(run: Run, make_fakes: MakeFakes) -> None:
    """The user pauses mid-sentence and goes on: a partial of the second segment is prefilled
    after the first segment's words, as the turn's prompt will read (the second segment alone
    would overwrite the cells the first segment's words already have, and the turn would
    evaluate all its words again after the user stopped)."""
    context = SequenceCheckingLlm("ctx", pieces=2)
    fakes = make_fakes(stt=FakeStt(respond=_heard_by_level), contexts=[context], turn=FakeTurn(0.1))
    config = make_config(partials=True)
    config = dataclasses.replace(config, llm=dataclasses.replace(config.llm, prefill=True))

    async def main() -> None:
        async with running(fakes, config) as (session, log):
            await pause(session, 160)
            await speak(session, 320)
            await pause(session, 192)  # the segment ends (96 ms), the turn does not (320 ms)
            await until(lambda: session.turn.heard_so_far() == "what is the weather")
            # One prefill per session at a time: the first segment's must be over before the
            # second's partials come, or they are skipped (as designed) and there is nothing to see.
            await until(lambda: not session.llm.prefilling)
            await speak(session, 960, amplitude=16000)
            await until(lambda: any("paris" in p.text for p in log.of_type(InputTranscriptDelta)))
            # The turn's end takes the context from a prefill that has not started (as designed):
            # the audio here comes faster than real time, so the end waits for the prefill to run.
            await until(lambda: any("paris" in p or "like" in p for p in context.prefills.items))
            await pause(session, 640)
            await log.wait_type(ResponseDone)
            later = [p for p in context.prefills.items if "paris" in p or "like" in p]
            assert later, context.prefills.items
            assert all(p.startswith("what is the weather like") for p in later), later
            assert context.prompts.items[-1] == "what is the weather like in paris today"
            assert session.turn.heard_so_far() == ""  # the turn is committed: nothing is pending
            assert context.violations.items == []

    run(main(), 20)


def test_partials_give_way_while_the_shared_decoder_is_busy(run: Run, make_fakes: MakeFakes) -> None:
    """Another session's decode holds the shared STT executor: partials are skipped (counted),
    not queued in front of it; the final decode still comes once the executor is free."""
    queued = Recorder()

    class Watched(PriorityExecutor):
        def submit_at(self, priority: int, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            queued.record(priority)
            return super().submit_at(priority, fn, *args, **kwargs)

    stt = FakeStt(respond=lambda audio: f"words {len(audio)}")
    stt.executor = Watched("fake-stt")
    fakes = make_fakes(stt=stt)
    held, release = threading.Event(), threading.Event()

    def other_sessions_decode() -> None:
        held.set()
        release.wait(10)

    async def main() -> None:
        async with running(fakes, make_config(partials=True)) as (session, log):
            blocker = stt.executor.submit(other_sessions_decode)
            await asyncio.to_thread(held.wait, 10)
            await pause(session, 160)
            await speak(session, 960)
            await pause(session, 64)
            # The first call queued after the blocker is the segment's decode: every partial
            # interval before it (960 ms of speech, 200 ms apart) was skipped.
            priorities = await queued.wait(2)
            assert priorities[1] == PRIORITY_FINAL
            assert session.stt.partials_skipped >= 3
            assert len(stt.calls) == 0
            release.set()
            await asyncio.wrap_future(blocker)
            await pause(session, 576)
            _, final = await log.wait_type(InputTranscriptDone)
            assert final.text.startswith("words ")
            assert log.of_type(InputTranscriptDelta) == []

    run(main(), 20)


def test_a_turn_of_two_segments_is_not_transcribed_again_while_other_decodes_wait(run: Run, make_fakes: MakeFakes) -> None:
    """Under load (another session's final queued on the shared decoder) the rejoin gives way:
    the turn is answered from its segments' own transcripts, at once."""
    release = threading.Event()
    texts = iter(["what is the capital", "of france", "(not asked)"])
    shared = PriorityExecutor("fake-stt")  # the real decoder's executor kind: it can tell it is busy

    def respond(audio: Any) -> str:
        text = next(texts)
        if text == "of france":  # another session's final arrives as this segment's is decoded
            shared.submit(release.wait, 10)
        return text

    stt = FakeStt(respond=respond)
    stt.executor = shared
    fakes = make_fakes(stt=stt, llm=FakeLlm([tokens("Paris.")] * 3), turn=FakeTurn(0.1))

    async def main() -> None:
        async with running(fakes, make_config(silence_ms=800)) as (session, log):
            try:
                transcript = await say_in_two_parts(session, log, 480)
            finally:
                release.set()
            assert transcript.text == "what is the capital of france"
            assert (session.turn.rejoined, session.stt.rejoins_skipped) == (0, 1)
            assert len(fakes.stt.calls) == 2  # the two segments only

    run(main(), 20)


# --------------------------------------------------------------------------- (b) barge-in


REPLY = "Alpha bravo charlie delta, echo foxtrot golf hotel india juliet kilo lima. Mike november oscar papa quebec romeo sierra tango."
REPLY_WORDS = REPLY.split()


@dataclass
class BargeIn:
    session_items: list[Any]
    log: EventLog
    first: ResponseCreated
    cleared: PlaybackCleared
    cancelled: ResponseDone
    second_done: ResponseDone
    barge_start: InputSpeechStarted
    prompts: list[Any]
    indices: dict[str, int]


async def barge_in_scenario(fakes: FakeEngines) -> BargeIn:
    """A long reply paced at 125 ms a chunk with 125 ms lead; the user speaks at 750 ms of playback.

    By then 8 chunks (1000 ms: all of clause 0 and half of clause 1) were sent and 750 ms played.
    """
    clock = VirtualClock()
    async with running(fakes, make_config(lead_ms=125), clock) as (session, log):
        await pause(session, 160)
        await say_turn(session)
        i_first, first = await log.wait_type(ResponseCreated)
        # two chunks go at once (the first, and the next within the lead), then one per 125 ms
        await log.wait_type(AudioDelta, offset_ms=125.0)
        for k in range(2, 8):
            clock.advance(CHUNK_S)
            await log.wait_type(AudioDelta, offset_ms=125.0 * k)
        assert clock.now() == 0.75
        assert not [d for d in log.of_type(AudioDelta) if d.offset_ms > 875.0]
        # a 64 ms blip is not enough to interrupt (barge_in_ms is 96) ...
        await speak(session, 64)
        await pause(session, 128)  # (a gap: a dip of up to 64 ms would join the blip to what follows)
        # ... 128 ms of speech is
        await speak(session, 128)
        i_cleared, cleared = await log.wait_type(PlaybackCleared)
        i_cancelled, cancelled = await log.wait_type(ResponseDone, response_id=first.response_id)
        i_barge, barge_start = await log.wait_type(InputSpeechStarted, after=i_first)
        await pause(session, 640)
        i_second, second_done = await log.wait_type(ResponseDone, after=i_cancelled + 1)
        return BargeIn(
            session_items=list(session.history.items),
            log=log,
            first=first,
            cleared=cleared,
            cancelled=cancelled,
            second_done=second_done,
            barge_start=barge_start,
            prompts=fakes.llm.calls.items,
            indices={"cleared": i_cleared, "cancelled": i_cancelled, "barge": i_barge, "second": i_second},
        )


def barge_in_fakes(make_fakes: MakeFakes) -> FakeEngines:
    return make_fakes(
        stt=FakeStt(["tell me a story", "stop please"]),
        llm=FakeLlm([tokens(REPLY), ["Okay", "."]]),
        tts=FakeTts(ms_per_word=125.0),
        turn=FakeTurn(0.9),
    )


def test_barge_in_clears_playback_and_cancels_the_response(run: Run, make_fakes: MakeFakes) -> None:
    fakes = barge_in_fakes(make_fakes)
    r = run(barge_in_scenario(fakes), 20)
    log, idx = r.log, r.indices

    # the client is told to drop its buffer, with the position it had reached
    assert (r.cleared.response_id, r.cleared.item_id) == (r.first.response_id, r.first.item_id)
    assert r.cleared.heard_ms == 750.0
    assert r.cancelled.status is ResponseStatus.CANCELLED
    assert r.cancelled.reason == "turn_detected"
    assert r.cancelled.audio_ms == 1000.0  # what was sent
    # OpenAI's order: speech_started first, then the interrupted response is cleared and closed.
    assert idx["barge"] < idx["cleared"] < idx["cancelled"]
    # the blip did not start a turn: the barge-in speech starts at the 128 ms burst
    assert r.barge_start.audio_ms == 160 + 320 + 640 + 64 + 128
    assert len(log.of_type(InputSpeechStarted)) == 2
    # nothing more of the interrupted response reached the client
    late = [e for e in log.events[idx["cleared"] :] if isinstance(e, AudioDelta | OutputTranscriptDelta) and e.gen == r.first.gen]
    assert late == []
    assert sum(len(d.pcm) for d in log.of_type(AudioDelta) if d.response_id == r.first.response_id) == 24000  # 1000 ms

    # the history holds a strict word-prefix of the reply, and the next prompt uses exactly that
    user1, assistant1, user2, assistant2 = r.session_items
    assert isinstance(assistant1, AssistantItem) and isinstance(assistant2, AssistantItem)
    assert (user1.text, user2.text) == ("tell me a story", "stop please")
    heard_words = assistant1.text.split()
    assert 4 <= len(heard_words) < len(REPLY_WORDS)  # all of clause 0 was heard; clause 2 was never sent
    assert heard_words == REPLY_WORDS[: len(heard_words)]
    assert "Mike" not in assistant1.text
    assert assistant1.heard_ms == 750.0
    assert assistant1.status == "incomplete"
    assert r.cancelled.text == assistant1.text
    assert r.second_done.status is ResponseStatus.COMPLETED
    assert r.second_done.text == assistant2.text == "Okay."
    assert r.prompts[1].messages == (
        *PROMPT_HEAD,
        Message("user", "tell me a story"),
        Message("assistant", assistant1.text),
        Message("user", "stop please"),
    )


def test_barge_in_cuts_history_to_heard_audio(run: Run, make_fakes: MakeFakes) -> None:
    fakes = barge_in_fakes(make_fakes)
    r = run(barge_in_scenario(fakes), 20)
    assistant1 = r.session_items[1]
    assert isinstance(assistant1, AssistantItem)
    # 125 ms a word, 750 ms heard: the listener heard exactly the first six words
    words_heard = int(r.cleared.heard_ms // 125)
    assert words_heard == 6
    assert assistant1.text == " ".join(REPLY_WORDS[:words_heard])
    assert r.cancelled.text == assistant1.text


def words_fakes(make_fakes: MakeFakes, transcribe: Callable[[Any], str], replies: int = 1) -> FakeEngines:
    """Fakes for ``words`` mode: Whisper hears what ``transcribe`` says, the LLM tells ``replies``
    long stories then "Okay."; 125 ms a word."""
    return make_fakes(
        stt=FakeStt(respond=transcribe),
        llm=FakeLlm([*(tokens(REPLY) for _ in range(replies)), ["Okay", "."]]),
        tts=FakeTts(ms_per_word=125.0),
        turn=FakeTurn(0.9),
    )


async def story_under_way(session: Session, log: EventLog) -> tuple[int, ResponseCreated]:
    """The user asks; returns once the reply's second chunk was sent (its index and created event)."""
    await pause(session, 160)
    await say_turn(session)
    i_first, first = await log.wait_type(ResponseCreated)
    await log.wait_type(AudioDelta, offset_ms=125.0)
    return i_first, first


def test_words_mode_a_backchannel_pauses_the_reply_which_then_resumes_whole_and_real_words_cut_it(run: Run, make_fakes: MakeFakes) -> None:
    """``turn.interruption = "words"``: speech over the reply pauses its playout; "yeah" resumes
    it (no trace in the conversation), "stop please" cuts it as a barge-in."""
    decodes = threading.Event()  # cleared: decodes wait (the test looks at the pause meanwhile)
    decodes.set()
    saying = ["tell me a story"]  # what every decode hears now, partials and finals alike

    def transcribe(audio: Any) -> str:
        assert decodes.wait(deadline()), "the test never let the decode finish"
        return saying[0]

    fakes = words_fakes(make_fakes, transcribe, replies=2)

    async def main() -> None:
        clock = VirtualClock()
        async with running(fakes, make_config(lead_ms=125, interruption="words"), clock) as (session, log):
            i_first, first = await story_under_way(session, log)
            for k in range(2, 8):
                clock.advance(CHUNK_S)
                await log.wait_type(AudioDelta, offset_ms=125.0 * k)
            # "yeah" over the reply; its decodes wait until the test lets them finish.
            saying[0] = "yeah"
            decodes.clear()
            await speak(session, 128)
            # Silence past vad.stop_ms (96) but short of a judging partial (256 ms of audio): the
            # one decode is the final, asked once the speech was over, so its start and end are known.
            await pause(session, 160)
            await fakes.stt.calls.wait(2)
            hold = session.replies.hold
            assert hold.paused == first.gen and session.replies.core.floor.judging()
            decodes.set()
            await until(lambda: session.turn.dropped == 1)  # "yeah" judged: no turn, a resume armed
            assert hold.paused == first.gen  # not yet: after a little silence
            clock.advance(RESUME_SILENCE_S)
            for _ in range(40):  # the rest of the reply, 125 ms a chunk
                clock.advance(CHUNK_S)
                if log.of_type(ResponseDone):
                    break
                await log.wait_for(lambda e: isinstance(e, AudioDelta | ResponseDone), after=len(log.events))
            _, done = await log.wait_type(ResponseDone, response_id=first.response_id)
            assert hold.paused is None and session.turn.dropped == 1
            # Whole: completed, every sample sent once and in order, nothing told of the speech.
            assert done.status is ResponseStatus.COMPLETED and done.text == REPLY
            offsets = [d.offset_ms for d in log.of_type(AudioDelta) if d.response_id == first.response_id]
            assert offsets == [125.0 * k for k in range(len(offsets))] and len(offsets) * 125.0 == len(REPLY_WORDS) * 125.0
            assert len(log.of_type(InputSpeechStarted)) == 1 and log.of_type(PlaybackCleared) == []
            assert [i.text for i in session.history.items] == ["tell me a story", REPLY]
            # Now real words over the next reply: a barge-in as in immediate mode.
            saying[0] = "tell me another"
            await say_turn(session)
            _, second = await log.wait_type(ResponseCreated, after=i_first + 1)
            await log.wait_type(AudioDelta, response_id=second.response_id, offset_ms=125.0)
            saying[0] = "stop please"
            await speak(session, 128)
            await pause(session, 640)
            _, cut = await log.wait_type(ResponseDone, response_id=second.response_id)
            assert cut.status is ResponseStatus.CANCELLED and cut.reason == "turn_detected"
            assert len(log.of_type(InputSpeechStarted)) == 3
            [cleared] = log.of_type(PlaybackCleared)
            assert cleared.response_id == second.response_id
            await log.wait_type(InputTranscriptDone, text="stop please")  # the interruption is the next turn
            said = [i.text for i in session.history.items if isinstance(i, UserItem)]
            assert said == ["tell me a story", "tell me another", "stop please"]

    run(main(), 30)


async def resumed_to_the_end(clock: VirtualClock, log: EventLog, first: ResponseCreated) -> ResponseDone:
    """After speech over the reply was dismissed: the silence the resume waits for, then the
    playout clock run on until the reply's ``response.done``, which is returned."""
    clock.advance(RESUME_SILENCE_S)
    for _ in range(40):
        clock.advance(CHUNK_S)
        if log.of_type(ResponseDone):
            break
        await log.wait_for(lambda e: isinstance(e, AudioDelta | ResponseDone), after=len(log.events))
    _, done = await log.wait_type(ResponseDone, response_id=first.response_id)
    return done


def test_words_mode_a_word_the_transcriber_doubts_does_not_cut_the_reply(run: Run, make_fakes: MakeFakes) -> None:
    """The transcriber's confidence travels from the STT backend (a :class:`Transcript`) through
    the final segment to the verdict: a sneeze written "Two." at low confidence resumes the reply."""
    saying: list[str] = ["tell me a story"]
    fakes = words_fakes(make_fakes, lambda audio: saying[0])
    doubted = Transcript("Two.", Config().turn.interruption_min_confidence / 3)

    async def main() -> None:
        clock = VirtualClock()
        async with running(fakes, make_config(lead_ms=125, interruption="words"), clock) as (session, log):
            _, first = await story_under_way(session, log)
            saying[0] = doubted
            await speak(session, 128)
            await pause(session, 160)
            await until(lambda: session.turn.dropped == 1)  # judged: no turn
            done = await resumed_to_the_end(clock, log, first)
            assert done.status is ResponseStatus.COMPLETED and done.text == REPLY
            assert log.of_type(PlaybackCleared) == [] and [i.text for i in session.history.items] == ["tell me a story", REPLY]

    run(main(), 30)


@pytest.mark.parametrize(("margin", "cut"), [(-Config().turn.interruption_sound_margin / 2, False), (-12.0, True)])
def test_words_mode_words_read_again_as_sounds_decide_by_the_margin(run: Run, make_fakes: MakeFakes, margin: float, cut: bool) -> None:
    """The second reading travels from the STT backend (a ``SoundReader``, in its executor)
    through the turn stage's segment to the verdict: "and mamam" (a hummed "Mm-hmm, sure.")
    that reads almost as well in backchannels resumes the reply whole; words that read far worse
    cut it.  The user's own turn before it is not read again."""
    saying: list[str] = ["tell me a story"]
    stt = FakeSoundStt(respond=lambda audio: saying[0], margin=lambda text: margin)
    fakes = make_fakes(stt=stt, llm=FakeLlm([tokens(REPLY), ["Okay", "."]]), tts=FakeTts(ms_per_word=125.0), turn=FakeTurn(0.9))

    async def main() -> None:
        clock = VirtualClock()
        async with running(fakes, make_config(lead_ms=125, interruption="words"), clock) as (session, log):
            _, first = await story_under_way(session, log)
            assert stt.readings.items == []
            saying[0] = Transcript("and mamam", 0.5)
            await speak(session, 128)
            await pause(session, 160)
            if cut:
                _, done = await log.wait_type(ResponseDone, response_id=first.response_id)
                assert done.status is ResponseStatus.CANCELLED and done.reason == "turn_detected"
                await log.wait_type(InputTranscriptDone, text="and mamam")
            else:
                await until(lambda: session.turn.dropped == 1)
                done = await resumed_to_the_end(clock, log, first)
                assert done.status is ResponseStatus.COMPLETED and log.of_type(PlaybackCleared) == []
                assert [i.text for i in session.history.items] == ["tell me a story", REPLY]
            [(samples, language, phrases, text, thread)] = stt.readings.items
            assert samples > 0 and language == "en" and "mm-hmm" in phrases and thread.startswith("fake-stt")
            assert text == "and mamam"  # the transcript judged: the reading is weighed against it
            assert session.turn.read_again == 1

    run(main(), 30)


@pytest.mark.parametrize(("speech", "cut"), [(Config().turn.interruption_min_speech / 3, False), (0.9, True)])
def test_words_mode_words_the_sound_model_hears_as_no_speech_are_a_sound(run: Run, make_fakes: MakeFakes, speech: float, cut: bool) -> None:
    """The sound model's reading travels from its backend (on its own executor) through the
    turn stage's segment to the verdict: "Just..." (a tongue click) in which it hears no speech
    resumes the reply whole; the same words heard as speech cut it.  Neither the user's own turn
    nor words that take the floor are read by it."""
    saying: list[str] = ["tell me a story"]
    sound = FakeSound(lambda samples: speech)
    fakes = make_fakes(
        stt=FakeStt(respond=lambda audio: saying[0]),
        sound=sound,
        llm=FakeLlm([tokens(REPLY), ["Okay", "."]]),
        tts=FakeTts(ms_per_word=125.0),
    )

    async def main() -> None:
        clock = VirtualClock()
        async with running(fakes, make_config(lead_ms=125, interruption="words"), clock) as (session, log):
            _, first = await story_under_way(session, log)
            assert sound.readings.items == []  # an ordinary turn is never read
            saying[0] = Transcript("Just...", 0.5)
            await speak(session, 128)
            await pause(session, 160)
            if cut:
                _, done = await log.wait_type(ResponseDone, response_id=first.response_id)
                assert done.status is ResponseStatus.CANCELLED and done.reason == "turn_detected"
            else:
                await until(lambda: session.turn.dropped == 1)
                done = await resumed_to_the_end(clock, log, first)
                assert done.status is ResponseStatus.COMPLETED and log.of_type(PlaybackCleared) == []
                assert [i.text for i in session.history.items] == ["tell me a story", REPLY]
            [(samples, thread)] = sound.readings.items
            assert samples > 0 and thread.startswith("fake-sound") and session.turn.heard_again == 1

    run(main(), 30)


def test_words_mode_a_sound_model_that_raises_leaves_the_words_to_decide(run: Run, make_fakes: MakeFakes) -> None:
    """A sound model that fails is logged and the segment judged by its words: a real request
    still cuts the reply, and the session goes on."""
    saying: list[str] = ["tell me a story"]

    def broken(samples: int) -> float:
        raise RuntimeError("the model fell over")

    sound = FakeSound(broken)
    fakes = make_fakes(
        stt=FakeStt(respond=lambda audio: saying[0]),
        sound=sound,
        llm=FakeLlm([tokens(REPLY), ["Okay", "."]]),
        tts=FakeTts(ms_per_word=125.0),
    )

    async def main() -> None:
        clock = VirtualClock()
        async with running(fakes, make_config(lead_ms=125, interruption="words"), clock) as (session, log):
            _, first = await story_under_way(session, log)
            saying[0] = Transcript("Make it funny.", 0.5)
            await speak(session, 128)
            await pause(session, 160)
            _, done = await log.wait_type(ResponseDone, response_id=first.response_id)
            assert done.status is ResponseStatus.CANCELLED and done.reason == "turn_detected"
            await log.wait_type(InputTranscriptDone, text="Make it funny.")
            assert len(sound.readings.items) == 1 and log.of_type(ErrorEvent) == []

    run(main(), 30)


@pytest.mark.parametrize("joined", [False, True])
def test_words_mode_three_words_are_read_again_alone_but_not_joined_with_a_dismissed_backchannel(
    run: Run, make_fakes: MakeFakes, joined: bool
) -> None:
    """Three real words over the agent are read again as sounds when judged alone ("and then
    them", a hummed "Mm-hmm, sure.": dismissed at a margin of 0); joined with a dismissed
    "Yeah, yeah." before them they are not (a reading of the joined clip could spell the
    backchannel and stop), so "Yeah, yeah, make it funny." cuts the reply unread."""
    saying: list[str] = ["tell me a story"]
    single: list[int] = []  # the longest clip of the first half's decodes, once it was dismissed
    joined_text = Transcript("Yeah, yeah, make it funny.", 0.6)

    def hears(audio: Any) -> str:
        if joined and single and len(audio) > 1.5 * single[0]:
            return joined_text  # the joined clip: both halves and the gap between them
        return saying[0]

    stt = FakeSoundStt(respond=hears, margin=lambda text: 0.0)
    fakes = make_fakes(stt=stt, llm=FakeLlm([tokens(REPLY), ["Okay", "."]]), tts=FakeTts(ms_per_word=125.0), turn=FakeTurn(0.9))

    async def main() -> None:
        clock = VirtualClock()
        async with running(fakes, make_config(lead_ms=125, interruption="words"), clock) as (session, log):
            _, first = await story_under_way(session, log)
            if joined:
                saying[0] = Transcript("Yeah, yeah.", 0.5)
                before = len(stt.calls)
                await speak(session, 128)
                await pause(session, 160)
                await until(lambda: session.turn.dropped == 1)  # a backchannel: dismissed, not read
                single.append(max(c.samples for c in stt.calls.items[before:]))
                saying[0] = Transcript("make it funny", 0.6)
                await speak(session, 128)  # the second half, before the reply resumes
                await pause(session, 640)
                _, cut = await log.wait_type(ResponseDone, response_id=first.response_id)
                assert cut.status is ResponseStatus.CANCELLED and cut.reason == "turn_detected"
                assert session.turn.joined_over_agent == 1 and stt.readings.items == []
                await log.wait_type(InputTranscriptDone, text=str(joined_text))
            else:
                saying[0] = Transcript("and then them", 0.3)
                await speak(session, 128)
                await pause(session, 160)
                await until(lambda: session.turn.dropped == 1)
                done = await resumed_to_the_end(clock, log, first)
                assert done.status is ResponseStatus.COMPLETED
                assert [r[3] for r in stt.readings.items] == ["and then them"]

    run(main(), 30)


def test_words_mode_a_split_interruption_is_judged_again_as_one_clip_with_the_dismissed_half(run: Run, make_fakes: MakeFakes) -> None:
    """ "Hold on, please." cut at its comma: each half alone is heard as a word the transcriber
    doubts and is dismissed; the second half, joined with the first and transcribed again as one
    clip, is heard whole and cuts the reply, and the user's turn is the whole clip's text."""
    halves = Transcript("Champion.", Config().turn.interruption_min_confidence / 3)
    whole = Transcript("Hold on, please.", 0.6)
    single: list[int] = []  # the longest clip of the first half's decodes, once it was dismissed
    saying: list[str] = ["tell me a story"]

    def hears(audio: Any) -> str:
        if saying[0] is halves and single and len(audio) > 1.5 * single[0]:
            return whole  # the joined clip: both halves and the gap between them
        return saying[0]

    fakes = words_fakes(make_fakes, hears)

    async def main() -> None:
        clock = VirtualClock()
        async with running(fakes, make_config(lead_ms=125, interruption="words"), clock) as (session, log):
            _, first = await story_under_way(session, log)
            saying[0] = halves
            before = len(fakes.stt.calls)
            await speak(session, 128)
            await pause(session, 160)
            await until(lambda: session.turn.dropped == 1)  # the first half: doubted, dismissed
            single.append(max(c.samples for c in fakes.stt.calls.items[before:]))
            await speak(session, 128)  # the second half, before the reply resumes
            await pause(session, 640)
            _, cut = await log.wait_type(ResponseDone, response_id=first.response_id)
            assert cut.status is ResponseStatus.CANCELLED and cut.reason == "turn_detected"
            assert session.turn.joined_over_agent == 1 and session.turn.dropped == 1
            await log.wait_type(InputTranscriptDone, text=str(whole))

    run(main(), 30)


def test_words_mode_partials_decide_while_the_user_still_speaks_even_with_partials_off(run: Run, make_fakes: MakeFakes) -> None:
    """While speech over a reply is judged, Whisper transcribes it every 500 ms of audio, and once
    it has lasted a second those partials decide: "wait stop" cuts the reply before the user has
    stopped talking (``stt.partials`` is off here)."""
    saying = ["tell me a story"]
    returned = [0]  # decodes that have returned (the fake records each call as it starts)

    def hears(audio: Any) -> str:
        try:
            return saying[0]
        finally:
            returned[0] += 1

    fakes = words_fakes(make_fakes, hears)

    def cut_yet(log: EventLog, first: ResponseCreated) -> bool:
        return any(isinstance(e, ResponseDone) and e.response_id == first.response_id for e in log.events)

    async def main() -> None:
        async with running(fakes, make_config(lead_ms=125, interruption="words"), VirtualClock()) as (session, log):
            _, first = await story_under_way(session, log)
            saying[0] = "wait stop"
            decodes = len(fakes.stt.calls.items)
            # The user keeps talking (no silence: the VAD never sees the speech end) until a
            # partial decides.  Half a second at a time, each time until the decodes asked have
            # returned: a judging partial is skipped while the one before it still runs, and on a
            # loaded machine a decode can outlast the audio it judges.
            for _ in range(10):
                await speak(session, 500)
                await until(lambda: returned[0] == len(fakes.stt.calls.items))
                if cut_yet(log, first):
                    break
            _, cut = await log.wait_type(ResponseDone, response_id=first.response_id)
            assert cut.status is ResponseStatus.CANCELLED and cut.reason == "turn_detected"
            assert len(fakes.stt.calls.items) > decodes  # a partial decided, with stt.partials off
            since = log.events[log.events.index(first) :]
            assert not [e for e in since if isinstance(e, InputSpeechStopped)]  # the user had not stopped
            [started] = [e for e in since if isinstance(e, InputSpeechStarted)]
            deltas = [e for e in log.of_type(InputTranscriptDelta) if e.item_id == started.item_id]
            assert deltas and {d.text for d in deltas} == {"wait stop"}

    run(main(), 30)


# --------------------------------------------------------------------------- (c) speculation


def test_speculative_answer_is_retracted_when_the_user_goes_on(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["what is the weather", "like in Paris"]),
        llm=FakeLlm([tokens("Speculative answer."), tokens("Final answer.")]),
        turn=FakeTurn(0.1),  # never judged complete: only the 320 ms silence confirms
    )

    async def main() -> None:
        async with running(fakes, make_config(silence_ms=320)) as (session, log):
            bumps: list[int] = []
            session.scope.subscribe(bumps.append)
            await pause(session, 160)
            await speak(session, 320)
            await pause(session, 192)  # the segment ends (96 ms), the turn does not (320 ms)
            await fakes.tts.calls.wait(1)  # the speculative answer is already being spoken ...
            assert fakes.llm.calls.items[0].user_text == "what is the weather"
            assert log.of_type(ResponseCreated) == []  # ... but held back
            await speak(session, 320)
            await pause(session, 640)
            _, done = await log.wait_type(ResponseDone)

            assert bumps == [1, 2, 3]  # speculate, retract, speculate again (and confirm it)
            [created] = log.of_type(ResponseCreated)
            assert created.gen == 3
            assert done.status is ResponseStatus.COMPLETED
            assert done.text == "Final answer."
            assert fakes.tts.calls.items == ["Speculative answer.", "Final answer."]
            # the first speculative generation never reached the client
            assert {e.gen for e in log.of_type(AudioDelta)} == {3}
            assert [e.text for e in log.of_type(OutputTranscriptDelta)] == ["Final answer."]
            # one turn, whose prompt joins both segments
            assert [c.user_text for c in fakes.llm.calls.items] == ["what is the weather", "what is the weather like in Paris"]
            assert len(log.of_type(InputSpeechStarted)) == 1
            [committed] = log.of_type(InputCommitted)
            [transcript] = log.of_type(InputTranscriptDone)
            assert transcript.text == "what is the weather like in Paris"
            assert committed.item_id == transcript.item_id
            assert [i.text for i in session.history.items] == ["what is the weather like in Paris", "Final answer."]
            assert session.turn.retractions == 1

    run(main(), 20)


# --------------------------------------------------------------------------- (d) failures


def test_llm_failure_fails_the_response_and_the_next_turn_is_answered(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["first question", "second question"]),
        llm=FakeLlm([RuntimeError("llm exploded"), tokens("Second answer.")]),
    )

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await say_turn(session)
            i_failed, failed = await log.wait_type(ResponseDone)
            _, error = await log.wait_type(ErrorEvent)
            assert failed.status is ResponseStatus.FAILED
            assert failed.reason is not None and "llm exploded" in failed.reason
            assert failed.text == ""
            assert error.code == "llm_failed"
            assert error.kind == "server_error"
            assert "llm exploded" in error.message
            [created] = log.of_type(ResponseCreated)
            assert failed.response_id == created.response_id
            assert log.of_type(AudioDelta) == []

            await say_turn(session)
            _, answered = await log.wait_type(ResponseDone, after=i_failed + 1)
            assert answered.status is ResponseStatus.COMPLETED
            assert answered.text == "Second answer."
            # the failed (empty) answer is not in the next prompt
            assert fakes.llm.calls.items[1].messages == (
                *PROMPT_HEAD,
                Message("user", "first question"),
                Message("user", "second question"),
            )
            assert [(i.role, i.text) for i in session.history.items] == [
                ("user", "first question"),
                ("assistant", ""),
                ("user", "second question"),
                ("assistant", "Second answer."),
            ]
            assert len(log.of_type(ErrorEvent)) == 1
            assert session.metrics.errors == 1
            # the failing generator was cleaned up in the LLM's executor
            assert all(t.startswith("fake-llm") for t in await fakes.llm.closed.wait(2))

    run(main(), 20)


def test_tts_failure_fails_the_response_and_the_session_goes_on(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["one", "two"]),
        llm=FakeLlm([tokens("Fine, I will say poison now. And more."), tokens("All good.")]),
        tts=FakeTts(fail_on="poison"),
    )

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await say_turn(session)
            i_failed, failed = await log.wait_type(ResponseDone)
            _, error = await log.wait_type(ErrorEvent)
            assert failed.status is ResponseStatus.FAILED
            assert error.code == "tts_failed"
            assert "poison" in error.message
            assert "And more" not in fakes.tts.calls.items  # nothing after the failed clause was spoken
            await say_turn(session)
            _, answered = await log.wait_type(ResponseDone, after=i_failed + 1)
            assert answered.status is ResponseStatus.COMPLETED
            assert answered.text == "All good."

    run(main(), 20)


def test_stt_failure_is_reported_and_makes_no_turn(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt([RuntimeError("decoder crashed"), "hello again"]), llm=FakeLlm([tokens("Hi.")]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await say_turn(session)
            i_error, error = await log.wait_type(ErrorEvent)
            assert error.code == "stt_failed"
            assert "decoder crashed" in error.message
            # The client learns which item's transcription failed (before the session-level error).
            _, started = await log.wait_type(InputSpeechStarted)
            i_failed, failed = await log.wait_type(InputTranscriptFailed)
            assert i_failed < i_error
            assert failed.item_id == started.item_id and "decoder crashed" in failed.message
            await say_turn(session)
            _, done = await log.wait_type(ResponseDone)
            # The next speech is a new item, announced as such.
            assert [s.item_id for s in log.of_type(InputSpeechStarted)][1] != failed.item_id
            assert log.of_type(InputTranscriptDone)[0].item_id != failed.item_id
            assert done.text == "Hi."
            assert len(log.of_type(ResponseCreated)) == 1
            assert [c.user_text for c in fakes.llm.calls.items] == ["hello again"]

    run(main(), 20)


# --------------------------------------------------------------------------- (e) manual turns


def test_manual_mode_commit_then_create_response(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(["manual words"]), llm=FakeLlm([tokens("Manual reply.")]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(turn_detection=None)
            await speak(session, 320)
            await pause(session, 160)
            await session.commit_input()
            _, transcript = await log.wait_type(InputTranscriptDone)
            _, committed = await log.wait_type(InputCommitted)
            assert transcript.text == "manual words"
            assert committed.item_id == transcript.item_id
            [stt] = fakes.stt.calls.items
            assert stt.samples == 480 * 16  # everything appended since the start
            # no VAD events and no answer of its own in manual mode
            assert log.of_type(InputSpeechStarted) == []
            assert log.of_type(InputSpeechStopped) == []
            assert log.of_type(ResponseCreated) == []
            assert len(fakes.llm.calls) == 0
            assert [(i.role, i.text) for i in session.history.items] == [("user", "manual words")]

            response_id = await session.create_response()
            _, created = await log.wait_type(ResponseCreated)
            _, done = await log.wait_type(ResponseDone)
            assert created.response_id == done.response_id == response_id
            assert created.previous_item_id == committed.item_id
            assert done.status is ResponseStatus.COMPLETED
            assert done.text == "Manual reply."
            [call] = fakes.llm.calls.items
            assert call.messages == (*PROMPT_HEAD, Message("user", "manual words"))

    run(main(), 20)


@pytest.mark.parametrize("tools_prompt", [True, False])
def test_each_decode_carries_the_sessions_transcription_prompt(run: Run, make_fakes: MakeFakes, tools_prompt: bool) -> None:
    weather = Tool("get_weather", "Get the current weather in a city", {"type": "object", "properties": {}})
    fakes = make_fakes(stt=FakeStt(default="words"))
    config = dataclasses.replace(make_config(), stt=SttConfig(partials=False, tools_prompt=tools_prompt))

    async def said(session: Session, log: EventLog) -> str:
        """The prompt of the decode of one more committed utterance."""
        before = len(log.events)
        await speak(session, 160)
        await session.commit_input()
        await log.wait_type(InputTranscriptDone, after=before)
        return fakes.stt.calls.items[-1].prompt

    async def main() -> None:
        async with running(fakes, config) as (session, log):
            session.update(turn_detection=None)
            assert await said(session, log) == ""  # no tools, no prompt
            session.update(tools=(weather,))
            # With stt.tools_prompt the tools' descriptions, each a sentence; without it nothing.
            assert await said(session, log) == ("Get the current weather in a city." if tools_prompt else "")
            session.update(transcription_prompt="Anna, Bob and Cairo.")
            assert await said(session, log) == "Anna, Bob and Cairo."  # the client's own wins
            session.update(transcription_prompt="")
            assert await said(session, log) == ("Get the current weather in a city." if tools_prompt else "")

    run(main(), 20)


def test_manual_mode_clear_drops_buffered_audio(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(["after clear"]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(turn_detection=None)
            await speak(session, 320)
            await session.clear_input()
            await log.wait_type(InputCleared)
            await speak(session, 160)
            await session.commit_input()
            await log.wait_type(InputTranscriptDone)
            [stt] = fakes.stt.calls.items
            assert stt.samples == 160 * 16  # only the audio after the clear

    run(main(), 20)


def test_text_items_and_create_response_with_instructions(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("Bonjour.")]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            earlier = await session.add_text("Earlier answer.", role="assistant")
            user_id = await session.add_text("Say hello")
            _, added = await log.wait_type(TextItemAdded, item_id=user_id)
            assert (added.previous_item_id, added.role, added.text) == (earlier, "user", "Say hello")
            _, first = await log.wait_type(TextItemAdded, item_id=earlier)
            assert (first.role, first.text) == ("assistant", "Earlier answer.")
            assert log.of_type(InputCommitted) == []  # no audio buffer was committed
            response_id = await session.create_response(instructions="Answer in French.")
            _, done = await log.wait_type(ResponseDone, response_id=response_id)
            assert done.text == "Bonjour."
            [call] = fakes.llm.calls.items
            assert call.messages == (
                Message("system", "Answer in French."),
                Message("assistant", "Earlier answer."),
                Message("user", "Say hello"),
            )

    run(main(), 20)


def test_a_response_asked_to_say_words_speaks_them_as_they_are_and_asks_no_model(run: Run, make_fakes: MakeFakes) -> None:
    """``ResponseOptions.say`` (a message left on an answering machine): the reply is those words,
    in the history and in the voice, clause by clause; the LLM is never asked."""
    fakes = make_fakes()
    words = "This is the clinic. Your appointment is on Tuesday at three."

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await session.add_text("Please leave a message after the tone.")
            response_id = await session.respond(ResponseOptions(tools=(), say=words))
            _, done = await log.wait_type(ResponseDone, response_id=response_id)
            assert done.text == words and done.status == ResponseStatus.COMPLETED
            assert fakes.llm.calls.items == []
            spoken = " ".join(str(c) for c in fakes.tts.calls.items)
            assert "clinic" in spoken and "Tuesday" in spoken
            assert [i.text for i in session.history.items if isinstance(i, AssistantItem)] == [words]

    run(main(), 20)


def test_the_reply_examples_go_with_the_servers_instructions_only(run: Run, make_fakes: MakeFakes) -> None:
    """The default prompt carries the examples after the system message; new instructions from the
    client (session.update) drop them, and a response with its own instructions has none."""
    fakes = make_fakes(llm=FakeLlm([tokens("One."), tokens("Two."), tokens("Three.")]))
    base = make_config()
    config = dataclasses.replace(base, llm=dataclasses.replace(base.llm, examples=DEFAULT_EXAMPLES))
    head = (Message("system", INSTRUCTIONS), *example_messages(parse_examples(DEFAULT_EXAMPLES)))

    async def main() -> None:
        async with running(fakes, config) as (session, log):
            assert len(head) == 7  # system + three exchanges
            await session.add_text("first")
            await log.wait_type(ResponseDone, response_id=await session.create_response())
            await session.add_text("second")
            await log.wait_type(ResponseDone, response_id=await session.create_response(instructions="Be brief."))
            session.update(instructions="Speak like a pirate.")
            assert session.settings.examples == ()
            await session.add_text("third")
            await log.wait_type(ResponseDone, response_id=await session.create_response())
            first, second, third = (c.messages for c in fakes.llm.calls.items)
            assert first == (*head, Message("user", "first"))
            assert second[:2] == (Message("system", "Be brief."), Message("user", "first"))
            assert third[:2] == (Message("system", "Speak like a pirate."), Message("user", "first"))

    run(main(), 20)


def test_an_update_that_keeps_the_instructions_keeps_the_examples(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes()
    base = make_config()
    config = dataclasses.replace(base, llm=dataclasses.replace(base.llm, examples=DEFAULT_EXAMPLES))

    async def main() -> None:
        async with running(fakes, config) as (session, _):
            before = session.settings.examples
            assert before == parse_examples(DEFAULT_EXAMPLES)
            session.update(instructions=INSTRUCTIONS, temperature=0.5)
            assert session.settings.examples == before
            session.update(instructions="Other.", examples=(("Hi.", "Ahoy!"),))
            assert session.settings.examples == (("Hi.", "Ahoy!"),)

    run(main(), 10)


# --------------------------------------------------------------------------- (f) API edges


def test_cancel_with_nothing_active_returns_false(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes()

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            assert await session.cancel_response() is False
            assert log.of_type(PlaybackCleared) == []

    run(main(), 10)


def test_truncate_and_delete_of_unknown_items_raise(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes()

    async def main() -> None:
        async with running(fakes, make_config()) as (session, _):
            with pytest.raises(ProtocolError) as info:
                await session.truncate("item_nope", 100.0)
            assert (info.value.code, info.value.param) == ("item_not_found", "item_id")
            user_id = await session.add_text("hello")
            with pytest.raises(ProtocolError) as info:
                await session.truncate(user_id, 0.0)
            assert info.value.code == "invalid_item_type"
            with pytest.raises(ProtocolError) as info:
                session.delete_item("item_nope")
            assert info.value.code == "item_not_found"
            session.delete_item(user_id)
            assert session.history.items == []

    run(main(), 10)


def test_cancel_response_while_speaking(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(["tell me a story"]), llm=FakeLlm([tokens(REPLY)]))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(lead_ms=125), clock) as (session, log):
            await say_turn(session)
            _, created = await log.wait_type(ResponseCreated)
            await log.wait_type(AudioDelta, offset_ms=125.0)
            clock.advance(CHUNK_S)
            await log.wait_type(AudioDelta, offset_ms=250.0)
            with pytest.raises(ProtocolError) as info:
                await session.create_response()
            assert info.value.code == "conversation_already_has_active_response"
            assert await session.cancel_response() is True
            _, cleared = await log.wait_type(PlaybackCleared)
            _, done = await log.wait_type(ResponseDone)
            assert cleared.heard_ms == 125.0
            assert done.status is ResponseStatus.CANCELLED
            assert done.reason == "client_cancelled"
            assert done.text == "Alpha"  # 125 ms of a 125 ms-a-word reply
            assert await session.cancel_response() is False
            assert len(log.of_type(ResponseDone)) == 1
            assert created.response_id == done.response_id

    run(main(), 20)


def test_truncate_cuts_the_item_and_never_grows_it(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(["weather"]), llm=FakeLlm([tokens("It is sunny. Take a hat.")]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await say_turn(session)
            _, done = await log.wait_type(ResponseDone)
            assert done.audio_ms == 750.0
            await session.truncate(done.item_id, 250.0)
            _, truncated = await log.wait_type(ItemTruncated)
            assert (truncated.item_id, truncated.audio_end_ms, truncated.text) == (done.item_id, 250.0, "It is")
            await session.truncate(done.item_id, 600.0)
            _, second = await log.wait_type(ItemTruncated, audio_end_ms=600.0)
            assert second.text == "It is"  # a larger figure does not grow it back
            with pytest.raises(ProtocolError) as info:
                await session.truncate(done.item_id, 5000.0)
            assert (info.value.code, info.value.param) == ("invalid_audio_end_ms", "audio_end_ms")
            with pytest.raises(ProtocolError):
                await session.truncate(done.item_id, -1.0)
            assert session.history.messages("sys")[-1] == Message("assistant", "It is")

    run(main(), 20)


def test_truncate_of_the_item_being_paced_out_stops_its_audio_at_once(run: Run, make_fakes: MakeFakes) -> None:
    """The client declares the rest unheard while the server still holds it: nothing more of it
    is sent, the reply ends cancelled with what the client heard, and the next answer starts at
    once (not after the rest of the reply's playing time)."""
    fakes = make_fakes(stt=FakeStt(["tell me a story", "and then"]), llm=FakeLlm([tokens(REPLY), ["Next", "."]]))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(lead_ms=125), clock) as (session, log):
            await say_turn(session)
            _, created = await log.wait_type(ResponseCreated)
            await log.wait_type(AudioDelta, offset_ms=125.0)
            clock.advance(CHUNK_S)
            await log.wait_type(AudioDelta, offset_ms=250.0)
            await session.truncate(created.item_id, 125.0)
            i_done, done = await log.wait_type(ResponseDone, response_id=created.response_id)
            i_truncated, truncated = await log.wait_type(ItemTruncated)
            assert i_done < i_truncated  # the stop is acknowledged before the truncation
            assert done.status is ResponseStatus.CANCELLED and done.reason == "client_cancelled"
            assert done.text == truncated.text == "Alpha"  # 125 ms of a 125 ms-a-word reply
            assert session.active_response_id is None
            # Time passes: no more of that reply's audio, nor of its transcript, is sent.
            for _ in range(8):
                clock.advance(CHUNK_S)
                await asyncio.sleep(0)
            late = [e for e in log.events[i_done:] if isinstance(e, AudioDelta | OutputTranscriptDelta) and e.gen == created.gen]
            assert late == []
            assert max(d.offset_ms for d in log.of_type(AudioDelta) if d.response_id == created.response_id) == 250.0
            # The next turn is answered without waiting for the rest of the story to play.
            await say_turn(session)
            _, second = await log.wait_type(ResponseDone, after=i_done + 1)
            assert second.status is ResponseStatus.COMPLETED and second.text == "Next."
            assert fakes.llm.calls.items[1].messages[-2] == Message("assistant", "Alpha")

    run(main(), 20)


def test_output_audio_buffer_clear_is_a_barge_in_without_speech(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(["tell me a story"]), llm=FakeLlm([tokens(REPLY)]))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(lead_ms=125), clock) as (session, log):
            # Nothing playing: acknowledged all the same, and nothing else happens.
            await session.clear_output()
            _, idle = await log.wait_type(PlaybackCleared)
            assert (idle.response_id, idle.heard_ms) == ("", 0.0)
            await say_turn(session)
            _, created = await log.wait_type(ResponseCreated)
            await log.wait_type(AudioDelta, offset_ms=125.0)
            clock.advance(CHUNK_S)
            await log.wait_type(AudioDelta, offset_ms=250.0)
            await session.clear_output()
            i_cleared, cleared = await log.wait_type(PlaybackCleared, response_id=created.response_id)
            _, done = await log.wait_type(ResponseDone)
            assert cleared.heard_ms == 125.0  # the heard clock: what was played by now
            assert (done.status, done.reason, done.text) == (ResponseStatus.CANCELLED, "client_cancelled", "Alpha")
            for _ in range(8):
                clock.advance(CHUNK_S)
                await asyncio.sleep(0)
            assert not [e for e in log.events[i_cleared:] if isinstance(e, AudioDelta) and e.gen == created.gen]
            assert session.history.messages("sys")[-1] == Message("assistant", "Alpha")

    run(main(), 20)


def test_output_audio_buffer_clear_leaves_a_text_reply_and_names_no_finished_one(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("Just text."), tokens("Spoken.")]))
    clock = VirtualClock()

    async def main() -> None:
        async with running(fakes, make_config(lead_ms=125), clock) as (session, log):
            await session.add_text("hello")
            text_only = await session.create_response(audio=False)
            await session.clear_output()  # the text reply is still being generated
            _, cleared = await log.wait_type(PlaybackCleared)
            _, done = await log.wait_type(ResponseDone, response_id=text_only)
            assert (cleared.response_id, cleared.item_id) == ("", "")
            assert (done.status, done.text) == (ResponseStatus.COMPLETED, "Just text.")
            # A spoken reply, done and heard to its end: nothing is playing any more.
            spoken = await session.create_response()
            i_done, _ = await log.wait_type(ResponseDone, response_id=spoken)
            for _ in range(8):
                clock.advance(CHUNK_S)
                await asyncio.sleep(0)
            assert session.replies.core.agent_audible() is False
            await session.clear_output()
            _, cleared = await log.wait_type(PlaybackCleared, after=i_done)
            assert cleared.response_id == ""

    run(main(), 20)


def test_close_ends_events_and_stops_every_stage(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes()

    async def main() -> None:
        session = Session(fakes.engines, make_config(), clock=VirtualClock())
        async with session:
            assert session.metrics.sessions_active == 1
            log = EventLog(session)
            log.start()
            await speak(session, 96)
        await log.finished()  # events() ended
        assert session.metrics.sessions_active == 0
        for task in session._tasks:
            assert task.done()
        await session.aclose()  # idempotent
        assert session.metrics.sessions_active == 0

    run(main(), 10)


def test_sessions_share_engines_but_not_state(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(default="same words"), llm=FakeLlm(default=tokens("Same reply.")))

    async def main() -> None:
        async with (
            running(fakes, make_config(), session_id="sess_a") as (a, log_a),
            running(fakes, make_config(), session_id="sess_b") as (
                b,
                log_b,
            ),
        ):
            await asyncio.gather(say_turn(a), say_turn(b))
            _, done_a = await log_a.wait_type(ResponseDone)
            _, done_b = await log_b.wait_type(ResponseDone)
            assert done_a.text == done_b.text == "Same reply."
            assert done_a.response_id != done_b.response_id
            assert len(a.history.items) == len(b.history.items) == 2
            assert len(fakes.vad.streams) == 2  # one VAD state per session

    run(main(), 20)


def test_two_sessions_speaking_at_once_each_get_their_own_answer_without_interleaving(run: Run, make_fakes: MakeFakes) -> None:
    """Turns that end at the same instant on a stateful LLM: each reply answers its own session's
    question and no generation ever steps on another's sequence state."""
    contexts = [SequenceCheckingLlm("ctx0", pieces=6, step_s=0.002), SequenceCheckingLlm("ctx1", pieces=6, step_s=0.002)]
    # The transcript depends on how long the user spoke: the two sessions say different things.
    stt = FakeStt(respond=lambda audio: "question about cats" if len(audio) < 16000 * 0.6 else "question about dogs")
    fakes = make_fakes(stt=stt, contexts=contexts)

    async def main() -> None:
        async with (
            running(fakes, make_config(), session_id="sess_a") as (a, log_a),
            running(fakes, make_config(), session_id="sess_b") as (
                b,
                log_b,
            ),
        ):
            for _turn in range(3):
                start_a, start_b = len(log_a.events), len(log_b.events)
                await asyncio.gather(say_turn(a, speech_ms=320), say_turn(b, speech_ms=800))
                _, done_a = await log_a.wait_type(ResponseDone, after=start_a)
                _, done_b = await log_b.wait_type(ResponseDone, after=start_b)
                assert done_a.status is done_b.status is ResponseStatus.COMPLETED
                assert done_a.text.startswith("question about cats"), done_a.text
                assert done_b.text.startswith("question about dogs"), done_b.text
        assert len(contexts[0].violations) == len(contexts[1].violations) == 0
        # Each session kept its own context across turns (its prefix stays warm).
        owners = {key: {i for k, i in fakes.pool.slot_history if k == key} for key in ("sess_a", "sess_b")}
        assert len(owners["sess_a"]) == len(owners["sess_b"]) == 1 and owners["sess_a"] != owners["sess_b"], fakes.pool.slot_history

    run(main(), 30)


@pytest.mark.parametrize(("audio_after_token_ms", "model_runs"), [(0.0, True), (1000.0, False)])
def test_the_turn_model_runs_only_where_its_answer_can_come_before_the_silence_fallback(
    run: Run, make_fakes: MakeFakes, audio_after_token_ms: float, model_runs: bool
) -> None:
    """When the first audio cannot exist before the silence fallback confirms the turn anyway
    (measured: the rest of the first clause and its synthesis), the turn model is not run."""
    fakes = make_fakes(stt=FakeStt(["hello there"]), turn=FakeTurn(0.9))
    ms = audio_after_token_ms / 1000.0
    fakes.engines.turn_cost = TurnCost(stt_s=0.0, turn_s=0.0, llm_first_token_s=0.0, llm_token_s=0.0, tts_first_s=ms, clause_tokens=1)

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await say_turn(session)
            _, done = await log.wait_type(ResponseDone)
            assert done.status is ResponseStatus.COMPLETED
            assert session.turn.model_skipped == (0 if model_runs else 1)

    run(main(), 10)
    assert (len(fakes.turn.calls) > 0) is model_runs


def test_a_turn_of_two_segments_is_transcribed_again_as_one_clip(run: Run, make_fakes: MakeFakes) -> None:
    # segment one, segment two, then both again as one clip (stt.rejoin)
    fakes = make_fakes(
        stt=FakeStt(["what is the capital", "of france", "what is the capital of France"]),
        llm=FakeLlm([tokens("Paris.")] * 3),
        turn=FakeTurn(0.1),  # never sure: the 800 ms silence fallback confirms
    )

    async def main() -> None:
        async with running(fakes, make_config(silence_ms=800)) as (session, log):
            # after 480 ms a segment ends (and its padding with it), the turn does not
            transcript = await say_in_two_parts(session, log, 480)
            assert transcript.text == "what is the capital of France"
            assert session.turn.rejoined == 1
            first, second, whole = (c.samples for c in fakes.stt.calls.items)
            # the clip: the first segment, the gap between them as silence, the second
            assert whole > first + second
            assert [m.content for m in session.history.messages("") if m.role == "user"] == ["what is the capital of France"]

    run(main(), 20)


class JudgingLlm(FakeLlm):
    """A fake LLM context that also tells how likely the user's words end a sentence."""

    def __init__(self, ends: dict[str, float], replies: Any = ()) -> None:
        super().__init__(replies)
        self.ends = ends
        self.judged = Recorder()  # the last user message of every judgement, in the executor

    def end_probability(self, messages: Any, tools: Any = ()) -> float | None:
        text = messages[-1].content
        self.judged.record(text)
        return self.ends.get(text)


def doubting_config(text_threshold: float) -> Config:
    config = make_config(silence_ms=320)
    return dataclasses.replace(config, turn=dataclasses.replace(config.turn, incomplete_ms=1500, text_threshold=text_threshold))


def test_words_the_llm_doubts_end_a_sentence_keep_the_turn_open_until_the_speaker_goes_on(run: Run, make_fakes: MakeFakes) -> None:
    # The first half pauses longer than the 320 ms fallback: only the LLM's doubt keeps it from being a turn.
    llm = JudgingLlm({"how many wheels": 0.0006, "how many wheels does a bicycle have": 0.86}, [tokens("Many.")] * 2)
    fakes = make_fakes(
        stt=FakeStt(["how many wheels", "does a bicycle have", "how many wheels does a bicycle have"]), llm=llm, turn=FakeTurn(0.9)
    )

    async def main() -> None:
        async with running(fakes, doubting_config(0.003)) as (session, log):
            transcript = await say_in_two_parts(session, log, 640)
            assert transcript.text == "how many wheels does a bicycle have"
            assert (session.turn.doubted, session.turn.retractions) == (1, 1)
            assert [m.content for m in session.history.messages("") if m.role == "user"] == ["how many wheels does a bicycle have"]
            assert len(log.of_type(InputTranscriptDone)) == 1

    run(main(), 20)
    assert llm.judged.items == ["how many wheels", "how many wheels does a bicycle have"]


def test_an_engine_that_cannot_judge_the_words_leaves_turns_to_the_usual_rules(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(["how many wheels"]), llm=FakeLlm([tokens("Which ones?")]), turn=FakeTurn(0.9))

    async def main() -> None:
        async with running(fakes, doubting_config(0.003)) as (session, log):
            await say_turn(session)
            _, transcript = await log.wait_type(InputTranscriptDone)
            _, done = await log.wait_type(ResponseDone)
            assert (transcript.text, done.status) == ("how many wheels", ResponseStatus.COMPLETED)
            assert session.turn.doubted == 0

    run(main(), 10)
