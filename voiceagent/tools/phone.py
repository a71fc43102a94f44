"""Call control as tools on phone sessions (issue #68, item 4): ``end_call``, ``send_dtmf`` and,
where the operator named places to send callers, ``transfer_call``.

The model calls them like any tool; the server runs them itself (they are instant) and answers
the model with one plain sentence, so the agent says goodbye or "I'm putting you through" in its
next words.  What the call must then do is a :data:`CallAction` that the phone transport carries
out once that last reply has been heard: hang up, transfer, or play the digits.

Transfers go only to the targets the operator configured (``phone.transfer_targets``, by name):
a caller must not be able to talk the agent into dialling a number of the caller's choosing
(toll fraud, and a trust boundary the model cannot hold).  The tool's ``target`` is an enum of
those names (:attr:`voiceagent.config.PhoneConfig.targets`); with none configured,
``transfer_call`` is not offered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from voiceagent.tools.spec import Tool

__all__ = ["DTMF_DIGITS", "CallAction", "HangUp", "PhoneTools", "SendDigits", "Transfer"]

DTMF_DIGITS = "0123456789*#ABCD"
"""The sixteen keys of RFC 4733 / a telephone keypad."""
_MAX_DIGITS = 32

END_CALL = Tool(
    "end_call",
    "Hang up the phone call, after your goodbye. Use it when the caller says goodbye or asks to end the call.",
    {"type": "object", "properties": {}, "additionalProperties": False},
    # Only when the caller has just said goodbye or asked to hang up: the default 0.5B called it
    # for "Can you put me through to sales, please?" and the caller was hung up on.
    cue=r"\b(?:good[- ]?bye|bye|hang up|end (?:the|this) call|that'?s all|that is all|nothing else)\b",
)
SEND_DTMF = Tool(
    "send_dtmf",
    "Press keys on the phone keypad (to choose in an automated phone menu).",
    {
        "type": "object",
        "properties": {"digits": {"type": "string", "description": "The keys to press, e.g. 1 or 123#", "pattern": "^[0-9*#A-D]{1,32}$"}},
        "required": ["digits"],
        "additionalProperties": False,
    },
)


@dataclass(frozen=True, slots=True)
class HangUp:
    """End the call once the reply in progress has been heard."""


@dataclass(frozen=True, slots=True)
class Transfer:
    """Hand the call to ``target`` (a ``tel:``/E.164 number or a ``sip:`` URI), named ``name`` in
    the configuration, once the reply in progress has been heard."""

    name: str
    target: str


@dataclass(frozen=True, slots=True)
class SendDigits:
    """Play ``digits`` to the far end as keypad tones."""

    digits: str


CallAction = HangUp | Transfer | SendDigits


class PhoneTools:
    """The call-control tools of one phone session, and their runs."""

    def __init__(self, transfer_targets: Mapping[str, str] | None = None) -> None:
        self.targets = dict(transfer_targets or {})
        tools = [END_CALL, SEND_DTMF]
        if self.targets:
            names = sorted(self.targets)
            tools.append(
                Tool(
                    "transfer_call",
                    "Transfer the caller to a person or department: " + ", ".join(names) + ". Tell the caller first.",
                    {
                        "type": "object",
                        "properties": {"target": {"type": "string", "enum": names, "description": "Where to transfer the call"}},
                        "required": ["target"],
                        "additionalProperties": False,
                    },
                )
            )
        self.tools = tuple(tools)

    def handles(self, name: str) -> bool:
        return any(t.name == name for t in self.tools)

    def call(self, name: str, arguments: str) -> tuple[str, CallAction | None]:
        """The tool's output (one sentence the model reads) and what the call must do; a bad
        argument is an output that says so (a JSON ``error``) and no action: the model may ask
        again or tell the caller."""
        try:
            args = json.loads(arguments) if arguments.strip() else {}
            if not isinstance(args, dict):
                raise TypeError("the arguments must be an object")
            return self._run(name, args)
        except (KeyError, ValueError, TypeError) as exc:
            return json.dumps({"error": f"{type(exc).__name__}: {exc}"}), None

    def _run(self, name: str, args: dict[str, object]) -> tuple[str, CallAction]:
        # Each output reads well aloud: a small model sometimes speaks a tool's output as it is
        # (the 0.5B said "The call will end after your goodbye. Say goodbye now..." to a caller).
        if name == END_CALL.name:
            return "Goodbye, and thank you for calling.", HangUp()
        if name == SEND_DTMF.name:
            digits = str(args["digits"]).replace(" ", "").upper()
            if not 1 <= len(digits) <= _MAX_DIGITS or any(d not in DTMF_DIGITS for d in digits):
                raise ValueError(f"digits must be 1 to {_MAX_DIGITS} of {DTMF_DIGITS}, got {digits!r}")
            return f"I pressed {' '.join(digits)}.", SendDigits(digits)
        if name == "transfer_call" and self.targets:
            target = str(args["target"])
            if target not in self.targets:
                raise ValueError(f"unknown target {target!r}: one of {', '.join(sorted(self.targets))}")
            return f"I am transferring you to {target} now.", Transfer(target, self.targets[target])
        raise KeyError(name)
