"""The one Realtime client of the project, sans I/O: :class:`RealtimeClient` (server messages in,
typed events out, responses tracked), :mod:`~voiceagent.client.messages` (what a client sends) and
:class:`Pacer` (audio out at a microphone's pace).  ``talk --url``, ``replay``, the integration
tests and the fuzzer own their sockets and use these; the server's side is
:mod:`voiceagent.transports.realtime_codec`, and both read :mod:`voiceagent.transports.realtime_wire`.
"""

from voiceagent.client import messages
from voiceagent.client.core import RealtimeClient
from voiceagent.client.events import MalformedEvent, OtherEvent, ResponseStarted, SessionEvent
from voiceagent.client.pacer import Pacer
from voiceagent.client.responses import Response, ResponseTracker

__all__ = [
    "MalformedEvent",
    "OtherEvent",
    "Pacer",
    "RealtimeClient",
    "Response",
    "ResponseStarted",
    "ResponseTracker",
    "SessionEvent",
    "messages",
]
