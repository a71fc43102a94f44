"""Client-side state of one ``voiceagent talk`` conversation, whoever runs the agent.

The in-process driver (:mod:`voiceagent.talk.local`) and the WebSocket driver
(:mod:`voiceagent.talk.remote`) hand their events to :class:`~voiceagent.talk.handler.TalkEvents`,
which makes calls on :class:`Conversation`; it plays reply audio, prints transcripts, decides what
a barge-in cuts (from the speaker's own playback clock) and tells when a file-driven conversation
is over.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from voiceagent.audio import Int16Array
from voiceagent.talk.console import Console
from voiceagent.talk.devices import Microphone, Speaker

__all__ = ["Conversation", "TalkResult", "ToolUse", "Truncation", "Turn", "feed_microphone"]


@dataclass
class Turn:
    role: str
    item_id: str
    text: str
    status: str = "completed"
    heard_ms: float | None = None
    spans_ms: dict[str, float] = field(default_factory=dict)
    """The server's per-turn timeline (``first_audio_sent`` is the latency), when it sent one."""


@dataclass(frozen=True)
class Truncation:
    """On barge-in: the listener heard ``audio_end_ms`` of assistant item ``item_id``."""

    item_id: str
    audio_end_ms: float


@dataclass(frozen=True)
class ToolUse:
    """A function call the agent made, and its output once one arrived."""

    call_id: str
    name: str
    arguments: str
    output: str | None = None


@dataclass
class TalkResult:
    turns: list[Turn] = field(default_factory=list)
    truncations: list[Truncation] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tools: list[ToolUse] = field(default_factory=list)


class Conversation:
    """See the module docstring.  ``tail_s``: quiet time after which a finished input ends the
    talk; ``pending_tail_s``: the longer quiet allowed while the user's speech has been heard but
    not yet answered or transcribed (on a loaded machine the transcript may come seconds after
    the speech: ending then would drop the last question unanswered).  ``clock``: the seconds
    those quiet times are measured on."""

    def __init__(
        self,
        speaker: Speaker,
        console: Console,
        *,
        tail_s: float = 2.0,
        pending_tail_s: float = 20.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.speaker = speaker
        self._clock = clock
        self.console = console
        self.tail_s = tail_s
        self.pending_tail_s = pending_tail_s
        self._user_pending = False  # speech heard, no transcript or response since
        self.result = TalkResult()
        self._open: dict[str, str] = {}  # response id → item id, while in progress
        self._agent_text: dict[str, str] = {}
        self._cut: set[str] = set()
        self._heard: dict[str, float] = {}
        self._audio_item: str | None = None
        self._done: dict[str, Turn] = {}
        self._last_activity = clock()

    def _touch(self) -> None:
        self._last_activity = self._clock()

    # ------------------------------------------------------------------ user side

    def user_speaking(self, text: str = "") -> None:
        """The user is talking; ``text``: the partial transcript so far."""
        self._touch()
        self._user_pending = True
        self.console.partial("you", text or "…")

    def user_stopped(self) -> None:
        self._touch()
        self._user_pending = True

    def user_final(self, item_id: str, text: str) -> None:
        self._touch()
        self._user_pending = False
        self.result.turns.append(Turn("user", item_id, text))
        self.console.user(text)

    # ------------------------------------------------------------------ agent side

    def response_started(self, response_id: str, item_id: str) -> None:
        self._touch()
        self._user_pending = False
        self._open[response_id] = item_id
        self._agent_text[item_id] = ""

    def agent_text(self, item_id: str, delta: str) -> None:
        self._touch()
        text = self._agent_text.get(item_id, "") + delta
        self._agent_text[item_id] = text
        self.console.partial("agent", text.strip())

    def audio(self, response_id: str, item_id: str, pcm: Int16Array, rate: int) -> None:
        """Reply audio; dropped when its item was cut by a barge-in (it was in flight)."""
        self._touch()
        if item_id in self._cut:
            return
        self._audio_item = item_id
        self.speaker.write(item_id, pcm, rate)

    def barge_in(self, item_id: str | None = None) -> list[Truncation]:
        """The user talked over the agent: stop playback now; returns what each cut item played.

        ``item_id`` is the item the agent says it interrupted (in-process); otherwise the item that
        last received audio.  Cut are: items with audio still queued, and that item while its
        response is still arriving or the speaker is still playing.
        """
        self._touch()
        items = self.speaker.clear()
        # An item that had finished arriving and playing lost nothing: it is not cut (a tiny
        # float difference between the two ways of counting its length must not drop a word).
        receiving = item_id if item_id is not None else self._audio_item
        if receiving is not None and (receiving in self._open.values() or self.speaker.busy()):
            items.add(receiving)
        cuts = []
        for item in sorted(items - self._cut):
            self._cut.add(item)
            heard = self.speaker.played_ms(item)
            self._heard[item] = heard
            cuts.append(Truncation(item, heard))
        self.result.truncations.extend(cuts)
        return cuts

    def response_done(self, response_id: str, item_id: str, status: str, text: str) -> None:
        self._touch()
        self._open.pop(response_id, None)
        heard = self._heard.get(item_id)
        turn = Turn("assistant", item_id, text, status, heard)
        self._done[response_id] = turn
        self.result.turns.append(turn)
        self.console.agent(text, status=status, heard_ms=heard)

    def tool_call(self, call_id: str, name: str, arguments: str) -> None:
        self._touch()
        self.result.tools.append(ToolUse(call_id, name, arguments))
        self.console.tool(f"{name}({arguments})")

    def tool_output(self, call_id: str, output: str) -> None:
        self._touch()
        for n, use in enumerate(self.result.tools):
            if use.call_id == call_id:
                self.result.tools[n] = ToolUse(use.call_id, use.name, use.arguments, output)
        self.console.tool(f"-> {output}")

    def metrics(self, response_id: str, spans: dict[str, float]) -> None:
        """The server's timeline of a finished turn (it follows the response's end)."""
        turn = self._done.pop(response_id, None)
        if turn is not None:
            turn.spans_ms = dict(spans)
        self.console.latency(spans)

    def error(self, message: str) -> None:
        self._touch()
        self.result.errors.append(message)
        self.console.error(message)

    # ------------------------------------------------------------------ end of a file conversation

    def responding(self) -> bool:
        """Whether a response is in progress (its audio may still be arriving, with gaps)."""
        return bool(self._open)

    def idle(self) -> bool:
        """No response in progress, nothing left to play, and ``tail_s`` of quiet, or
        ``pending_tail_s`` while speech heard has had neither a transcript nor a response (speech
        the server drops as a sound gets neither, so that wait is bounded too)."""
        quiet = self._clock() - self._last_activity
        return not self._open and not self.speaker.busy() and quiet >= (self.pending_tail_s if self._user_pending else self.tail_s)


async def feed_microphone(
    mic: Microphone, conv: Conversation, send: Callable[[Int16Array], Awaitable[None]], reader: asyncio.Task[None], max_tail_s: float
) -> None:
    """Hand each microphone frame to ``send`` until the talk is over: the microphone is exhausted
    (a file has ended) and the conversation idle, or ``max_tail_s`` has passed since it was, or
    ``reader`` (the driver's event side) has ended.  A live microphone never ends by itself.
    Cancellation: propagates from ``mic.frames()`` or ``send``; nothing is left half-sent here.
    """
    ended: float | None = None
    async for pcm in mic.frames():
        await send(pcm)
        if mic.exhausted:
            ended = ended or time.monotonic()
            if conv.idle() or time.monotonic() - ended > max_tail_s:
                return
        if reader.done():
            return
