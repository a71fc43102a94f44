"""What a placed call does with its verdict (voiceagent.transports.machine_answer), at the seam
of the session it steers: the agent's answers held until the verdict, then given back and used
(a person, or nobody heard), or the call hung up, or a message left once the machine records;
and ``machine_detection``'s JSON checked strictly."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from voiceagent.config import Config
from voiceagent.config.prompts import SILENT_CALLEE
from voiceagent.conversation.reply import ResponseOptions
from voiceagent.errors import ProtocolError
from voiceagent.events import InputTranscriptDone, ResponseDone
from voiceagent.events.frames import ResponseStatus
from voiceagent.settings import SessionSettings, settings_from_config
from voiceagent.transports.machine_answer import MachinePlan, MachineWatch, machine_plan
from voiceagent.transports.machine_detection import Answered

RATE = 16000


class StubSession:
    """The part of a Session the watch uses, recording what it was asked."""

    id = "sess_stub"

    def __init__(self) -> None:
        self.settings: SessionSettings = settings_from_config(Config())
        self.active_response_id: str | None = None
        self.created = 0
        self.responded: list[ResponseOptions] = []
        self.cancelled: list[str] = []
        self.refuse: ProtocolError | None = None  # what respond raises, when set

    def update(self, **changes: Any) -> SessionSettings:
        self.settings = dataclasses.replace(self.settings, **changes)
        return self.settings

    async def create_response(self) -> str:
        self.created += 1
        return "resp_answer"

    async def respond(self, options: ResponseOptions) -> str:
        if self.refuse is not None:
            raise self.refuse
        self.responded.append(options)
        self.active_response_id = "resp_message"
        return "resp_message"

    async def cancel_response(self, reason: str) -> bool:
        self.cancelled.append(reason)
        return True


class Harness:
    def __init__(self, plan: MachinePlan) -> None:
        self.session = StubSession()
        self.told: list[Answered] = []
        self.hung_up = 0
        self.heard_then_hung_up: list[str] = []
        self.watch = MachineWatch(self.session, plan, self.told.append, self._hang_up, self._when_heard)  # type: ignore[arg-type]
        self.watch.hold()

    async def _hang_up(self) -> None:
        self.hung_up += 1

    async def _when_heard(self, response_id: str) -> None:
        self.heard_then_hung_up.append(response_id)

    async def audio(self, ms: float, tone_hz: float = 0.0) -> None:
        """Silence, or a tone of ``tone_hz``."""
        n = int(RATE * ms / 1000)
        pcm = (np.sin(2 * np.pi * tone_hz * np.arange(n) / RATE) * 8000).astype(np.int16) if tone_hz else np.zeros(n, dtype=np.int16)
        await self._feed(pcm)

    async def turn(self, ms: float, text: str) -> None:
        """A voice for ``ms`` (a 150 Hz voice's harmonics), then its transcript."""
        t = np.arange(int(RATE * ms / 1000)) / RATE
        await self._feed((sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 8)) * 2500).astype(np.int16))
        await self.watch.event(InputTranscriptDone(t=0.0, gen=0, item_id="item_u", text=text))

    async def _feed(self, pcm: np.ndarray[Any, Any]) -> None:
        for i in range(0, len(pcm), 320):
            await self.watch.audio(pcm[i : i + 320])


def test_the_answers_are_held_until_a_person_is_heard_then_given_back_and_used(run: Any) -> None:
    h = Harness(MachinePlan())
    td = h.session.settings.turn_detection
    assert td is not None and not td.create_response

    async def call() -> None:
        await h.audio(500)
        await h.turn(500, "Hello?")
        assert h.session.created == 0 and not h.told
        await h.audio(900)

    run(call())
    assert [v.by for v in h.told] == ["human"]
    td = h.session.settings.turn_detection
    assert td is not None and td.create_response and h.session.created == 1 and h.hung_up == 0


def test_nobody_speaking_is_unknown_and_the_agent_speaks_first(run: Any) -> None:
    h = Harness(MachinePlan())
    run(h.audio(5200))
    assert [v.by for v in h.told] == ["unknown"] and h.session.created == 0
    (options,) = h.session.responded
    assert options.instructions is not None and options.instructions.endswith(SILENT_CALLEE)


def test_a_machine_is_hung_up_on_when_the_plan_says_so(run: Any) -> None:
    h = Harness(MachinePlan("hangup"))

    async def call() -> None:
        await h.audio(300)
        await h.turn(1200, "Hi, you've reached Sam.")

    run(call())
    assert [v.by for v in h.told] == ["machine"] and h.hung_up == 1 and h.session.created == 0


def test_a_message_is_left_when_the_beep_ends_and_the_call_hung_up_once_it_was_heard(run: Any) -> None:
    h = Harness(MachinePlan("voicemail", "Call the clinic back."))

    async def call() -> None:
        await h.audio(300)
        await h.turn(1200, "Please leave a message after the tone.")
        assert [v.by for v in h.told] == ["machine"] and not h.session.responded  # not over the greeting
        await h.audio(400)
        await h.audio(500, tone_hz=1000)
        assert not h.session.responded  # not over the beep
        await h.audio(100)
        assert len(h.session.responded) == 1
        await h.audio(1000)
        assert len(h.session.responded) == 1  # once
        done = ResponseDone(t=0.0, gen=1, response_id="resp_message", item_id="item_a", status=ResponseStatus.COMPLETED, text="")
        await h.watch.event(done)

    run(call())
    options = h.session.responded[0]
    assert options.say == "Call the clinic back."  # word for word: no model asked
    td = h.session.settings.turn_detection
    assert td is not None and not td.interrupt_response  # nothing the machine plays cuts the message
    assert options.tools == () and h.heard_then_hung_up == ["resp_message"] and h.hung_up == 0 and h.session.created == 0


def test_a_person_who_turns_out_a_machine_stops_the_agent_and_gets_the_message_after_the_beep(run: Any) -> None:
    h = Harness(MachinePlan("voicemail", "Call the clinic back."))

    async def call() -> None:
        await h.turn(400, "Hello.")
        await h.audio(900)
        assert [v.by for v in h.told] == ["human"] and h.session.created == 1
        h.session.active_response_id = "resp_answer"  # the agent answers the "Hello."
        await h.turn(1200, "This is Tom.")
        await h.audio(500, tone_hz=1000)
        assert [v.by for v in h.told] == ["human", "machine"]
        td = h.session.settings.turn_detection
        assert td is not None and not td.create_response and h.session.cancelled == ["machine_detection"]
        h.session.active_response_id = None
        assert not h.session.responded  # not over the beep
        await h.audio(100)
        assert [o.say for o in h.session.responded] == ["Call the clinic back."]

    run(call())


def test_a_message_the_session_refuses_ends_the_call_instead_of_the_connection(run: Any) -> None:
    h = Harness(MachinePlan("voicemail", "Call the clinic back."))
    h.session.refuse = ProtocolError("invalid_state", "a transcription session does not answer")

    async def call() -> None:
        await h.turn(1200, "Please leave a message after the tone.")
        await h.audio(400)
        await h.audio(500, tone_hz=1000)
        await h.audio(100)  # the beep ended: the message is due, and refused
        await h.audio(1000)  # not tried again

    run(call())
    assert h.hung_up == 1 and h.session.responded == []


def test_a_person_whose_words_come_late_is_answered_not_greeted_as_silent(run: Any) -> None:
    h = Harness(MachinePlan())

    async def call() -> None:
        await h._feed(np.zeros(RATE // 2, dtype=np.int16))
        t = np.arange(int(RATE * 0.5)) / RATE
        await h._feed((sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 8)) * 2500).astype(np.int16))
        await h.audio(2400)  # 0.8 s of silence and 1.5 s more: a person's, their words not in yet

    run(call())
    assert [v.by for v in h.told] == ["human"] and "its words not heard in time" in h.told[0].reasons[0]
    assert h.session.created == 1 and h.session.responded == []  # answered from what they said, not told nobody spoke


def test_the_release_gives_back_only_create_response_and_manual_turns_are_left_to_the_application(run: Any) -> None:
    h = Harness(MachinePlan())
    td = h.session.settings.turn_detection
    assert td is not None
    h.session.update(turn_detection=dataclasses.replace(td, silence_duration_ms=900))  # a sideband's update meanwhile

    async def call() -> None:
        await h.turn(500, "Hello?")
        await h.audio(900)

    run(call())
    td = h.session.settings.turn_detection
    assert td is not None and td.create_response and td.silence_duration_ms == 900 and h.session.created == 1

    h = Harness(MachinePlan())
    h.session.update(turn_detection=None)  # the application takes turns by hand
    run(call())
    assert [v.by for v in h.told] == ["human"] and h.session.created == 0 and h.session.responded == []


def test_continue_leaves_a_machine_to_the_application(run: Any) -> None:
    h = Harness(MachinePlan("continue"))
    run(h.turn(3000, "Hi there, you've reached the Smith family."))
    assert [v.by for v in h.told] == ["machine"] and h.hung_up == 0 and not h.session.responded and h.session.created == 0


@pytest.mark.parametrize(
    ("value", "plan"),
    [
        ({}, MachinePlan("hangup", "")),
        ({"voicemail": " Call us back. "}, MachinePlan("voicemail", "Call us back.")),
        ({"on_machine": "continue"}, MachinePlan("continue", "")),
    ],
)
def test_machine_detection_json_defaults(value: dict[str, Any], plan: MachinePlan) -> None:
    assert machine_plan(value) == plan


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("yes", "must be an object"),
        ({"on_machine": "voicemail"}, "needs the message"),
        ({"on_machine": "fax"}, "must be one of hangup, voicemail, continue"),
        ({"voicemail": "x" * 1001}, "at most 1000 characters"),
        ({"beep": True}, "unknown field(s) beep"),
    ],
)
def test_machine_detection_json_errors_say_what_is_wrong(value: Any, says: str) -> None:
    with pytest.raises(ValueError, match=None) as err:
        machine_plan(value)
    assert says in str(err.value)
