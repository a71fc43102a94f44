"""Model engines behind small Protocols, loaded lazily by name (see :mod:`.registry`)."""

from voiceagent.backends.protocols import LlmBackend, Message, SttBackend, TtsBackend, TurnBackend, VadBackend, VadStream
from voiceagent.backends.registry import Engines, load_engines, warm_up

__all__ = [
    "Engines",
    "LlmBackend",
    "Message",
    "SttBackend",
    "TtsBackend",
    "TurnBackend",
    "VadBackend",
    "VadStream",
    "load_engines",
    "warm_up",
]
