"""Model engines behind small Protocols, loaded lazily by name (see :mod:`.registry`)."""

from voiceagent.backends.protocols import (
    LlmContext,
    LlmEngine,
    LlmRequest,
    LlmStats,
    Pacing,
    SttBackend,
    TtsBackend,
    TurnBackend,
    VadBackend,
    VadStream,
)
from voiceagent.backends.registry import Engines, load_engines, warm_up
from voiceagent.tools.spec import Message

__all__ = [
    "Engines",
    "LlmContext",
    "LlmEngine",
    "LlmRequest",
    "LlmStats",
    "Message",
    "Pacing",
    "SttBackend",
    "TtsBackend",
    "TurnBackend",
    "VadBackend",
    "VadStream",
    "load_engines",
    "warm_up",
]
