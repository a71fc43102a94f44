"""One conversation: the wiring of its stages, its history and its turn controller.

A transport drives a :class:`Session` through its methods (``append_audio``, ``commit_input``,
``add_text``, ``create_response``, ``cancel_response``, ``truncate``, ``update``) and reads what
to send to its client from :meth:`Session.events`.  The session is cheap: the models live in the
shared :class:`~voiceagent.backends.Engines`.

The session builds the pipeline (bounded channels, the stages) and owns the input side (audio,
text items, truncation).  Everything about answers (the generation counter, each reply's state,
barge-in, tool calls) belongs to its conversation core
(:class:`~voiceagent.conversation.core.ConversationCore`), which its
:class:`~voiceagent.conversation.replies.ReplyController` drives.

Cancellation: ``aclose()`` (or leaving ``async with``) cancels every stage task and timer and
waits for them; model calls already running in executors finish in their threads and are
discarded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any

from voiceagent.audio import PIPELINE_RATE, Int16Array
from voiceagent.backends.registry import Engines
from voiceagent.clock import Clock, MonotonicClock
from voiceagent.config import OPENAI_VOICES, Config
from voiceagent.conversation.history import AssistantItem, History, new_id
from voiceagent.conversation.prompt_fit import PromptFitter
from voiceagent.conversation.replies import ReplyController
from voiceagent.conversation.reply import ResponseOptions
from voiceagent.denoise import NEEDS_LIVEKIT, NoiseSuppressor, suppressor_installed
from voiceagent.errors import ProtocolError, StageError, excerpt
from voiceagent.events import (
    AudioFrame,
    ErrorEvent,
    Event,
    InputClear,
    InputCleared,
    InputCommit,
    InputTranscriptFailed,
    ItemTruncated,
    SoundHeard,
    TextItemAdded,
    TranscriptSegment,
)
from voiceagent.observability.metrics import Metrics
from voiceagent.pipeline import Channel, Generations, StageContext
from voiceagent.pipeline.gate import GenerationGate
from voiceagent.settings import InputItem, SessionSettings, settings_from_config
from voiceagent.stages.llm import LlmOptions, LlmPorts, LlmStage
from voiceagent.stages.playout import PlayoutStage
from voiceagent.stages.stt import SttOptions, SttPorts, SttStage
from voiceagent.stages.tts import TtsOptions, TtsPorts, TtsStage
from voiceagent.stages.turn import TurnOptions, TurnPorts, TurnStage
from voiceagent.stages.vad import VadOptions, VadPorts, VadStage
from voiceagent.text.backchannel import phrases_for
from voiceagent.tools.phone import PhoneTools
from voiceagent.tools.spec import Tool, with_tools

__all__ = ["QUEUES", "Session"]

log = logging.getLogger(__name__)

QUEUES = ("vad", "stt", "turn", "llm", "tts", "playout", "outbox")
"""The queues of a session in pipeline order: the inbox of each stage, then the outbox to the
client (:meth:`Session.queue_depths`, ``voiceagent_queue_depth``)."""
_INBOX = 256  # per stage; ~5 s of 20 ms audio frames before back-pressure reaches the transport
_OUTBOX = 1024
_CLOSED = object()


class Session:
    """A conversation with one client.  Use ``async with Session(...) as s:``.

    ``clock`` times the audio and the turns (monotonic); ``wall_clock`` is the local date and
    time the built-in tools report (``tools.builtin``).  Both are injected for tests."""

    def __init__(
        self,
        engines: Engines,
        config: Config,
        *,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        session_id: str | None = None,
        wall_clock: Callable[[], dt.datetime] | None = None,
        phone: PhoneTools | None = None,
    ) -> None:
        """``phone``: the call-control tools of a phone call's session (its transport carries out
        their :class:`~voiceagent.events.CallControl` events); None for every other session."""
        self.id = session_id or new_id("sess")
        self.config = config
        self.clock: Clock = clock or MonotonicClock()
        self.metrics = metrics or Metrics()
        # The semantic cache is on for a session wherever the server has one (cache.semantic); a
        # client may turn it off for its own session (session.voiceagent.semantic_cache).
        self.settings: SessionSettings = dataclasses.replace(settings_from_config(config), semantic_cache=engines.cache is not None)
        self.history = History()
        self._engines = engines
        self._fitter = PromptFitter(engines.llm, engines.llm.window or config.llm.context, config.llm.max_tokens)
        self._outbox: asyncio.Queue[object] = asyncio.Queue(maxsize=_OUTBOX)
        self._tasks: list[asyncio.Task[None]] = []
        self._channels: tuple[Channel[Event], ...] = ()
        self._audio_ms = 0.0
        self._denoiser: NoiseSuppressor | None = None
        self._follow_noise_reduction()
        self._arrivals: deque[tuple[float, float]] = deque(maxlen=3000)  # (end_ms, clock time)
        self._started = False
        self._closed = False
        self.replies = ReplyController(self.id, self.clock, config, self.metrics, self.history, self, wall_clock, self._fitter, phone)
        self.scope: Generations = self.replies.generations

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Session:
        await self.start()
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Build the stages and start their tasks."""
        if self._started:
            return
        self._started = True
        cfg = self.config
        replies = self.replies
        ctx = StageContext(self.id, self.clock, self.scope, replies.on_event, self._on_stage_error)

        def chan(name: str) -> Channel[Event]:
            return Channel(name, _INBOX, self.scope, on_wait=self.metrics.queue_wait, clock=self.clock.now)

        self._vad_in, stt_in, turn_in, llm_in, tts_in, play_in = (chan(n) for n in QUEUES[:-1])
        # The stages' dependencies on each other, named: the TTS stage's first audio lets the LLM
        # stage have the CPU back, the LLM stage's first token tells the turn stage that an answer
        # is under way, the turn stage asks the STT stage to transcribe a whole turn again, and the
        # LLM stage tells the turn stage how likely the user's sentence is to end.
        first_audio = GenerationGate(enabled=cfg.llm.yield_to_tts, scope=self.scope)
        first_token = GenerationGate(enabled=cfg.llm.yield_to_tts, timeout_s=0.5, scope=self.scope)
        settings = self.current_settings  # stages read the settings current at each use
        self.vad = VadStage(
            ctx,
            self._vad_in,
            stt_in,
            VadPorts(self._engines.vad, settings, replies.core.agent_audible),
            VadOptions.from_config(cfg.vad, cfg.turn.interruption),
        )
        self.stt = SttStage(
            ctx,
            stt_in,
            turn_in,
            SttPorts(self._engines.stt, settings, self._engines.stt_finals, self._engines.stt_partials, replies.core.floor.judging),
            SttOptions.from_config(cfg.stt),
        )
        turn_cost = self._engines.turn_cost
        self.turn = TurnStage(
            ctx,
            turn_in,
            llm_in,
            TurnPorts(
                turns=replies.core,
                backend=self._engines.turn if cfg.turn.model != "none" else None,
                settings=settings,
                llm_started=first_token,
                may_speculate=replies.core.may_speculate,
                takes_turn=replies.segment_heard,
                judging=replies.core.floor.judging,
                rejoin=self.stt.decode_clip if cfg.stt.rejoin else None,
                reads_again=replies.core.floor.reads_segment_again,
                read_as_sounds=self._read_as_sounds,
                hears_again=replies.core.floor.hears_segment_again if self._engines.sound is not None else None,
                hear_sounds=self._hear_sounds if self._engines.sound is not None else None,
            ),
            TurnOptions.from_config(cfg, min_audio_ms=turn_cost.audio_after_first_token_s * 1000.0 if turn_cost else 0.0),
        )
        self.llm = LlmStage(
            ctx,
            llm_in,
            tts_in,
            LlmPorts(
                engine=self._engines.llm,
                prompt=replies.prompt,
                settings=settings,
                tts_first_audio=first_audio,
                first_token=first_token,
                sentence_end=self.turn.sentence_end if cfg.turn.text_threshold > 0 else None,
                cache=self._engines.cache,
                on_cache=self.metrics.observe_cache,
                heard_before=self.turn.heard_so_far,
            ),
            LlmOptions.from_config(cfg.llm),
        )
        replies.connect(llm_in, play_in, self.llm.prefill, self.llm.completed if self._engines.cache is not None else None)
        self.tts = TtsStage(
            ctx,
            tts_in,
            play_in,
            TtsPorts(
                self._engines.tts,
                settings,
                first_audio=first_audio,
                speaks=replies.core.speaks,
                voices=self._engines.voice,
                spoken=self.llm.spoken if self._engines.cache is not None else None,
            ),
            TtsOptions.from_config(cfg.tts),
        )
        self.playout = PlayoutStage(ctx, play_in, cfg.playout.lead_ms, cfg.playout.chunk_ms, replies.hold)
        for stage in (self.vad, self.stt, self.turn, self.llm, self.tts, self.playout):
            self._tasks.append(asyncio.create_task(stage.run(), name=f"{self.id}.{stage.name}"))
        self._channels = (self._vad_in, stt_in, turn_in, llm_in, tts_in, play_in)
        self.metrics.session_opened()

    def _read_as_sounds(self, seg: TranscriptSegment) -> Awaitable[float | None]:
        """The second reading of a segment over a paused reply (the turn stage's port), in the
        session's backchannel phrases now (``turn.backchannels``, else its language's) and sound
        spellings.  Whether a segment is read so at all is the floor's ``reads_segment_again``
        (never in ``immediate`` mode, nor with ``turn.interruption_sound_margin`` < 0)."""
        phrases = phrases_for(self.current_settings().language, self.config.turn.backchannels)
        return self.stt.read_as_sounds(seg.audio, seg.text, phrases)

    async def _hear_sounds(self, seg: TranscriptSegment) -> SoundHeard | None:
        """The sound model's reading of a segment over a paused reply (the turn stage's port), on
        the model's own thread.  A model that raises is logged and the segment judged by its
        words alone: a reading that failed must not end the session.  Cancellation: propagates
        (the thread finishes the clip; its result is dropped)."""
        sound = self._engines.sound
        assert sound is not None
        try:
            return await asyncio.get_running_loop().run_in_executor(sound.executor, sound.hear, seg.audio)
        except Exception:
            log.exception("session %s: the sound model failed on a segment; judged by its words alone", self.id)
            return None

    async def aclose(self) -> None:
        """Stop every stage.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, self.replies.aclose(), return_exceptions=True)
        if self._started:
            self.metrics.session_closed()
        if self._outbox.full():
            # Nobody is reading (the client is gone): make room so events() can still end.
            self._outbox.get_nowait()
        self._outbox.put_nowait(_CLOSED)

    async def events(self) -> AsyncIterator[Event]:
        """What to send to the client, in order, until the session closes."""
        while True:
            item = await self._outbox.get()
            if item is _CLOSED:
                return
            assert isinstance(item, Event)
            yield item

    def queue_depths(self) -> dict[str, int]:
        """Events waiting now in front of each stage, and in the outbox to the client."""
        depths = {ch.name: len(ch) for ch in self._channels}
        depths["outbox"] = self._outbox.qsize()
        return depths

    # ------------------------------------------------------------------ transport API

    def update(self, **changes: Any) -> SessionSettings:
        """Change session settings (fields of :class:`SessionSettings`); returns the new ones.

        New ``instructions`` drop the server's reply examples (they were written for its own
        instructions) unless ``examples`` is given too."""
        if "voice" in changes:
            changes["voice"] = self.resolve_voice(changes["voice"]) or changes["voice"]
        if "instructions" in changes and changes["instructions"] != self.settings.instructions:
            changes.setdefault("examples", ())
        if changes.get("kind") == "transcription" and self.settings.kind != "transcription":
            changes["mcp_servers"] = ()  # a transcription session calls no tools: its connections close
        self.settings = dataclasses.replace(self.settings, **changes)
        self._follow_noise_reduction()
        self.replies.settings_changed()
        if "mcp_servers" in changes:
            self.replies.mcp.configure(self.settings.mcp_servers)
        if changes.keys() & {"tools", "instructions", "examples"}:
            self.llm.warm()
        return self.settings

    def _follow_noise_reduction(self) -> None:
        """A suppressor while the settings ask for noise reduction, none otherwise."""
        if self.settings.noise_reduction is None:
            self._denoiser = None  # its remainder (under 10 ms) goes with it
        elif self._denoiser is None:
            self._denoiser = NoiseSuppressor()  # near and far field: the same suppressor, kept

    @property
    def voice_names(self) -> list[str]:
        """The voices a client may pick (``tts.voices``, the default first)."""
        return list(self._engines.voices) or [self.config.tts.model]

    def resolve_voice(self, name: str) -> str | None:
        """The voice of the table a client's voice ``name`` speaks with (an OpenAI voice name
        maps through ``tts.openai_voices``); None when the name is neither."""
        names = self.voice_names
        voice = name if name in names else self.config.tts.openai_voice_map.get(name)
        return voice if voice in names else None

    async def check_update(self, **changes: Any) -> None:
        """Refuse changes the session cannot honour, leaving the settings untouched: a voice
        neither in the table nor OpenAI's (``invalid_value``, the names listed), a new voice once the session has
        spoken (``cannot_update_voice``, as OpenAI), a switch to a transcription session while a
        response is active (``invalid_state``), the semantic cache turned on where the server has
        none (``unsupported_value``), noise reduction where ``livekit`` is not installed
        (``unsupported_value``), and instructions and tools that would leave
        the LLM's window no room for a turn (``context_length_exceeded``).  Call it before
        :meth:`update` with the same changes."""
        if changes.get("kind") == "transcription" and self.settings.kind != "transcription" and self.replies.core.active_response_id:
            raise ProtocolError(
                "invalid_state",
                "cannot become a transcription session while a response is active; cancel it first (response.cancel)",
                param="session.type",
            )
        if changes.get("semantic_cache") and self._engines.cache is None:
            raise ProtocolError(
                "unsupported_value",
                "this server runs without the semantic reply cache; its operator turns it on with cache.semantic = true",
                param="session.voiceagent.semantic_cache",
            )
        if changes.get("noise_reduction") and not suppressor_installed():
            raise ProtocolError("unsupported_value", NEEDS_LIVEKIT, param="session.audio.input.noise_reduction")
        asked = changes.get("voice")
        voice = None if asked is None else self.resolve_voice(asked)
        if asked is not None and voice is None:
            raise ProtocolError(
                "invalid_value",
                f"unknown voice {excerpt(asked)}; the voices are: {', '.join(self.voice_names)} "
                f"(and OpenAI's names: {', '.join(OPENAI_VOICES)})",
                param="session.audio.output.voice",
            )
        if voice is not None and voice != self.settings.voice and self.replies.core.spoke:
            raise ProtocolError(
                "cannot_update_voice",
                "cannot update a conversation's voice once assistant audio is present",
                param="session.audio.output.voice",
            )
        if not changes.keys() & {"instructions", "tools"}:
            return
        settings = dataclasses.replace(self.settings, **changes)
        tools = self.replies.offered_tools(settings.tools)
        await self._fitter.check_instructions(with_tools(settings.instructions, tools), tools)

    async def append_audio(self, pcm: Int16Array) -> None:
        """User audio at 16 kHz.  Waits (back-pressure) rather than dropping when stages lag.
        With noise reduction on, the VAD gets it suppressed in whole 10 ms frames
        (:mod:`voiceagent.denoise`)."""
        if self._denoiser is not None:
            pcm = self._denoiser.process(pcm)
            if not len(pcm):
                return
        now = self.clock.now()
        frame = AudioFrame(t=now, gen=self.scope.current, session=self.id, pcm=pcm, start_ms=self._audio_ms)
        self._audio_ms += len(pcm) * 1000.0 / PIPELINE_RATE
        self._arrivals.append((self._audio_ms, now))
        await self._vad_in.put_or_merge(frame, _join_audio)

    def current_settings(self) -> SessionSettings:
        """The settings as they are now (what stages read at each use)."""
        return self.settings

    @property
    def input_ms(self) -> float:
        """Milliseconds of user audio received so far."""
        return self._audio_ms

    async def commit_input(self) -> None:
        """Manual turn-taking: the buffered audio is a user turn (transcribed, added to history)."""
        await self._vad_in.put(InputCommit(t=self.clock.now(), gen=self.scope.current, session=self.id))

    async def clear_input(self) -> None:
        await self._vad_in.put(InputClear(t=self.clock.now(), gen=self.scope.current, session=self.id))
        await self.emit(InputCleared(t=self.clock.now(), gen=self.scope.current, session=self.id))

    async def add_text(self, text: str, role: str = "user", previous_item_id: str | None = None) -> str:
        """Add a text item to the history (``conversation.item.create``); returns its id.

        ``previous_item_id``: put it right after that item (``"root"``: first) instead of at the
        end; an id not in the history is refused (``item_not_found``) and nothing is added."""
        if previous_item_id not in (None, "root") and self.history.find(previous_item_id) is None:
            raise ProtocolError("item_not_found", f"no item {excerpt(previous_item_id)} to insert after", param="previous_item_id")
        if role == "assistant":
            item = self.history.add_assistant(-1, new_id("item"))
            item.add_clause(text)
            item.status = "completed"
            item_id = item.id
        else:
            item_id = self.history.add_user(text).id
        if previous_item_id is not None:
            self.history.move_after(item_id, None if previous_item_id == "root" else previous_item_id)
        await self.emit(
            TextItemAdded(
                t=self.clock.now(),
                gen=self.scope.current,
                session=self.id,
                item_id=item_id,
                previous_item_id=self.history.previous_id(item_id),
                role=role,
                text=text,
            )
        )
        await self.replies.trim_history()
        return item_id

    async def create_response(
        self,
        instructions: str | None = None,
        *,
        tools: tuple[Tool, ...] | None = None,
        tool_choice: str | None = None,
        audio: bool | None = None,
        out_of_band: bool = False,
        input: tuple[InputItem, ...] | None = None,
        metadata: dict[str, str] | None = None,
        max_output_tokens: int | None = None,
    ) -> str:
        """Answer now from the history (``response.create``), these options replacing the
        session's for this response only: see :meth:`respond`."""
        return await self.respond(ResponseOptions(instructions, tools, tool_choice, audio, out_of_band, input, metadata, max_output_tokens))

    async def respond(self, options: ResponseOptions) -> str:
        """Answer now from the history, as ``options`` ask; returns the response's id.  Refused
        (``ProtocolError``) as :meth:`ConversationCore.create_response` says."""
        return await self.replies.respond(options)

    @property
    def closing(self) -> bool:
        """True from the moment :meth:`aclose` is called (its stages may still be stopping)."""
        return self._closed

    @property
    def spoke(self) -> bool:
        """True once any reply's audio went to the client."""
        return self.replies.core.spoke

    @property
    def active_response_id(self) -> str | None:
        """The response being generated or spoken, if any."""
        return self.replies.core.active_response_id

    async def quiet(self) -> None:
        """Return once no response is active (at once if none is)."""
        await self.replies.quiet()

    async def cancel_response(self, reason: str = "client_cancelled") -> bool:
        """Stop the response being spoken (``response.cancel``); False when there is none."""
        return await self.replies.cancel_response(reason)

    async def add_tool_output(self, call_id: str, output: str) -> str:
        """The client's result of call ``call_id``: see :meth:`ConversationCore.add_tool_output`."""
        return await self.replies.add_tool_output(call_id, output)

    async def truncate(self, item_id: str, audio_end_ms: float) -> None:
        """The client played only ``audio_end_ms`` of assistant item ``item_id``: the history
        keeps that much.  If the item's reply is still being paced out, it stops now (no more of
        its audio is sent; it ends ``cancelled``: :meth:`ConversationCore.stop_item`)."""
        item = self.history.find(item_id)
        if item is None:
            raise ProtocolError("item_not_found", f"no item {excerpt(item_id)}", param="item_id")
        if not isinstance(item, AssistantItem):
            raise ProtocolError("invalid_item_type", "only assistant items can be truncated", param="item_id")
        if not math.isfinite(audio_end_ms) or audio_end_ms < 0 or audio_end_ms > item.audio_ms + 1.0:
            raise ProtocolError(
                "invalid_audio_end_ms",
                f"audio_end_ms {audio_end_ms} is outside the item's audio (0..{item.audio_ms:.0f} ms)",
                param="audio_end_ms",
            )
        item.cut(audio_end_ms, by_client=True)
        # The item may still be being paced out: what the client declared unheard is not sent.
        await self.replies.stop_item(item_id)
        await self.emit(
            ItemTruncated(
                t=self.clock.now(), gen=self.scope.current, session=self.id, item_id=item_id, audio_end_ms=audio_end_ms, text=item.text
            )
        )

    async def clear_output(self) -> None:
        """The client dropped its buffered playback (``output_audio_buffer.clear``): a barge-in
        without speech (:meth:`ConversationCore.clear_output`)."""
        await self.replies.clear_output()

    def delete_item(self, item_id: str) -> None:
        if not self.history.delete(item_id):
            raise ProtocolError("item_not_found", f"no item {excerpt(item_id)}", param="item_id")

    # ------------------------------------------------------------------ internals

    def arrival_time(self, audio_ms: float) -> float:
        """When the input audio up to ``audio_ms`` arrived (the end of speech, for the timeline)."""
        for end_ms, t in self._arrivals:
            if end_ms >= audio_ms:
                return t
        return self.clock.now()

    async def emit(self, event: Event) -> None:
        if isinstance(event, ErrorEvent):
            self.metrics.error(event.code)
        await self._outbox.put(event)

    async def _on_stage_error(self, err: StageError, gen: int) -> None:
        if err.stage == "stt":
            item_id = self.replies.transcription_failed()
            if item_id is not None:
                await self.emit(InputTranscriptFailed(t=self.clock.now(), gen=gen, session=self.id, item_id=item_id, message=err.message))
        await self.emit(
            ErrorEvent(t=self.clock.now(), gen=gen, session=self.id, code=f"{err.stage}_failed", message=err.message, kind="server_error")
        )


MERGE_SAMPLES = PIPELINE_RATE // 10
"""User audio waiting for the VAD is joined into frames of up to 100 ms: fewer trips through the
stages, and still fine-grained enough for partial transcripts and the VAD's reaction."""


def _join_audio(waiting: Event, frame: Event) -> Event | None:
    """``waiting`` and then ``frame`` as one frame, where both are user audio of the same
    generation, ``waiting`` ends where ``frame`` begins and the two fit :data:`MERGE_SAMPLES`
    (None otherwise: ``frame`` goes in on its own)."""
    if not isinstance(waiting, AudioFrame) or not isinstance(frame, AudioFrame) or waiting.gen != frame.gen:
        return None
    if len(waiting.pcm) + len(frame.pcm) > MERGE_SAMPLES or abs(waiting.end_ms - frame.start_ms) > 1e-6:
        return None
    return waiting.then(frame)
