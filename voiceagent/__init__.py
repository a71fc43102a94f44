"""voiceagent: a real-time voice agent.

The public API is small: configuration, the engines (models shared by a process), the session
(one conversation) and the server.  Everything else is internal and may change.
"""

import os
import sys

# numpy's OpenBLAS starts a worker thread per core when numpy is first imported, and after every
# matrix product (the mel filters of Whisper and the turn model) that worker spins for a while
# waiting for more: measured at 0.27 CPU-s per answered turn with 8 conversations on 2 cores
# (docs/decisions/admission.md), for products that take well under a millisecond on one thread.
# The models run their own thread pools. OpenBLAS reads the setting once, as numpy loads it, so
# it is set only for that import: processes started later (llama-server, a benchmark's servers)
# get the environment as the operator left it, and an operator's own setting always wins.
if "numpy" not in sys.modules and "OPENBLAS_NUM_THREADS" not in os.environ:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]

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
