"""What a placed call does with answering-machine detection (``POST /v1/sip/calls`` with
``machine_detection``): the agent holds its answers until the verdict, the call's record is told
who answered, and a machine gets what the plan says.

- While :class:`~.machine_detection.MachineDetector` listens, the session's turns end as usual
  (the callee's words enter the history) but start no answer: ``turn_detection.create_response``
  is off, as a Realtime client turns it off.
- ``human``: the setting comes back, and the agent answers what the person said.  A beep or a
  machine's words soon after (the detector's ``revise_ms``) make it a ``machine`` after all: the
  agent stops, holds again, and the machine gets what the plan says.
- ``unknown`` (nobody spoke, or no verdict in time): the same; with nothing said, the agent
  speaks first (the session's instructions closed with
  :data:`~voiceagent.config.prompts.SILENT_CALLEE`).
- ``machine``: ``on_machine`` ``hangup`` ends the call at once; ``voicemail`` waits until the
  machine records (its beep ended, or silence after its greeting), says ``voicemail`` word for
  word (:attr:`ResponseOptions.say <voiceagent.conversation.reply.ResponseOptions.say>`: no
  model is asked, so no model changes it) and hangs up once it has been heard; ``continue``
  leaves the call to the application (which reads the record and may ``hangup``), the agent
  still holding its answers.

Cancellation: no task of its own: each step runs inside the transport's call that fed it (the
media it received, the event it wrote), and is cancelled with it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from voiceagent.audio import Int16Array
from voiceagent.config.prompts import SILENT_CALLEE
from voiceagent.conversation.reply import ResponseOptions
from voiceagent.errors import ProtocolError
from voiceagent.events import Event, InputTranscriptDone, ResponseDone, ResponseStatus
from voiceagent.session import Session

from .machine_detection import Answered, MachineDetector

__all__ = ["ON_MACHINE", "MachinePlan", "MachineWatch", "machine_plan"]

log = logging.getLogger(__name__)

ON_MACHINE = ("hangup", "voicemail", "continue")
VOICEMAIL_MAX_CHARS = 1000


@dataclass(frozen=True)
class MachinePlan:
    """``machine_detection`` of a placed call: what to do when a machine answers."""

    on_machine: str = "hangup"
    voicemail: str = ""


def machine_plan(value: object) -> MachinePlan:
    """``machine_detection``'s JSON (``{"on_machine": …, "voicemail": …}``, both optional:
    ``voicemail`` given means ``on_machine`` ``voicemail``, else ``hangup``).  ``ValueError`` with
    the message for the client."""
    if not isinstance(value, dict):
        raise ValueError('machine_detection must be an object: {"on_machine": "hangup" | "voicemail" | "continue", "voicemail": text}')
    unknown = set(value) - {"on_machine", "voicemail"}
    if unknown:
        raise ValueError(f"machine_detection: unknown field(s) {', '.join(sorted(unknown))}")
    voicemail = value.get("voicemail", "")
    if not isinstance(voicemail, str) or len(voicemail) > VOICEMAIL_MAX_CHARS:
        raise ValueError(f"machine_detection.voicemail must be text of at most {VOICEMAIL_MAX_CHARS} characters")
    on_machine = value.get("on_machine", "voicemail" if voicemail.strip() else "hangup")
    if on_machine not in ON_MACHINE:
        raise ValueError(f"machine_detection.on_machine must be one of {', '.join(ON_MACHINE)}")
    if on_machine == "voicemail" and not voicemail.strip():
        raise ValueError("machine_detection.on_machine voicemail needs the message: machine_detection.voicemail")
    return MachinePlan(on_machine, voicemail.strip())


class MachineWatch:
    """One placed call's detection (module docstring).  ``told(verdict)`` gets the verdict (the
    call's record); ``hang_up()`` ends the call now; ``hang_up_when_heard(response_id)`` ends it
    once that reply has been heard."""

    def __init__(
        self,
        session: Session,
        plan: MachinePlan,
        told: Callable[[Answered], None],
        hang_up: Callable[[], Awaitable[None]],
        hang_up_when_heard: Callable[[str], Awaitable[None]],
    ) -> None:
        self.session = session
        self.plan = plan
        self.detector = MachineDetector()
        self._told = told
        self._hang_up = hang_up
        self._hang_up_when_heard = hang_up_when_heard
        self._held: Any = None  # the turn detection held (create_response off), to give back
        self._message_id: str | None = None
        self._words = False  # the callee has said something (a transcript with words)

    def hold(self) -> None:
        """Turns start no answer until the verdict (called once the call is answered)."""
        td = self.session.settings.turn_detection
        if td is not None and td.create_response:
            self._held = td
            self.session.update(turn_detection=dataclasses.replace(td, create_response=False))

    async def audio(self, pcm: Int16Array) -> None:
        """The callee's audio, as the session gets it (read until the verdict, and after it only
        while a message waits for the machine to record)."""
        verdict = self.detector.verdict
        waiting = verdict is not None and verdict.by == "machine" and self.plan.on_machine == "voicemail" and self._message_id is None
        if not (self.detector.listening() or waiting):
            return
        await self._act(self.detector.audio(pcm))
        if self._message_id is None and self.plan.on_machine == "voicemail" and self.detector.message_due():
            await self._leave_message()

    async def event(self, event: Event) -> None:
        """The session's events: the words of the callee's turns; the message's end."""
        if isinstance(event, InputTranscriptDone) and self.detector.listening():
            self._words = self._words or bool(event.text.strip())
            await self._act(self.detector.transcript(event.text))
        elif isinstance(event, ResponseDone) and event.response_id == self._message_id:
            if event.status != ResponseStatus.COMPLETED:
                log.warning("session %s: the message ended %s (%s)", self.session.id, event.status.value, event.reason or "-")
            await self._hang_up_when_heard(event.response_id)

    async def _act(self, verdict: Answered | None) -> None:
        if verdict is None:
            return
        log.info("session %s: answered by %s at %.0f ms (%s)", self.session.id, verdict.by, verdict.at_ms, "; ".join(verdict.reasons))
        self._told(verdict)
        if verdict.by != "machine":
            await self._release()
            return
        if self._held is None:  # a person's verdict revised: the agent stops talking to a machine
            self.hold()
            if self.session.active_response_id is not None:
                await self.session.cancel_response("machine_detection")
        if self.plan.on_machine == "hangup":
            await self._hang_up()

    async def _release(self) -> None:
        """Give the answers back, and answer what was said (or speak first: nothing was).  Only
        ``create_response`` is given back: whatever else changed meanwhile (a sideband's
        ``session.update``) stays.  With no turn detection (manual turns) the application answers."""
        td = self.session.settings.turn_detection
        if self._held is not None and td is not None:
            self.session.update(turn_detection=dataclasses.replace(td, create_response=self._held.create_response))
        self._held = None
        if td is None:
            return
        if self.session.active_response_id is None:
            try:
                if self._words or self.detector.voice_heard:  # their words may still be on their way: the answer waits for them
                    await self.session.create_response()
                else:
                    await self.session.respond(ResponseOptions(instructions=self.session.settings.instructions + SILENT_CALLEE))
            except ProtocolError as exc:  # a turn that began meanwhile answers for itself
                log.info("session %s: no answer after the verdict: %s", self.session.id, exc.message)

    async def _leave_message(self) -> None:
        """Say the message; nothing the machine plays (a second prompt, music, the line) may cut
        it: ``interrupt_response`` is off for it.  A session that cannot answer now (a sideband
        made it a transcription session) ends the call instead: a message never left is logged."""
        s = self.session
        td = s.settings.turn_detection
        if td is not None:
            s.update(turn_detection=dataclasses.replace(td, create_response=False, interrupt_response=False))
        try:
            if s.active_response_id is not None:
                await s.cancel_response("machine_detection")
            self._message_id = await s.respond(ResponseOptions(tools=(), say=self.plan.voicemail))
        except ProtocolError as exc:
            self._message_id = ""  # tried: not again at the next frame
            log.error("session %s: the message could not be left (%s): hanging up", s.id, exc.message)
            await self._hang_up()
            return
        log.info("session %s: leaving the message (%s)", s.id, self._message_id)
