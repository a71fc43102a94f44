"""voiceagent: a real-time voice agent.

The public API is small: configuration, the engines (models shared by a process), the session
(one conversation) and the server.  Everything else is internal and may change.
"""

from voiceagent.backends.registry import Engines, load_engines, warm_up
from voiceagent.config import Config, load_config
from voiceagent.errors import ConfigError, ModelError, ProtocolError, StageError, VoiceAgentError
from voiceagent.session import Session
from voiceagent.transports.server import VoiceAgentServer

__all__ = [
    "Config",
    "ConfigError",
    "Engines",
    "ModelError",
    "ProtocolError",
    "Session",
    "StageError",
    "VoiceAgentError",
    "VoiceAgentServer",
    "__version__",
    "load_config",
    "load_engines",
    "warm_up",
]

__version__ = "0.1.0"
