"""The one exception tree of voiceagent.

::

    VoiceAgentError                 base; ``retryable`` says whether the same call may succeed later
    ├── ConfigError                 invalid configuration (file, environment, flags, session.update)
    ├── ModelError                  a model cannot be located, prepared or loaded
    │   ├── MissingDependencyError  an optional package is not installed; names the extra to install
    │   └── ChecksumError           a prepared model file does not match the sha256 in the catalog
    ├── ProtocolError               a client sent something the wire protocol does not allow
    ├── StageError                  a backend raised while a stage was working on a turn
    ├── EngineError                 an LLM engine could not answer (server down, HTTP error, timeout)
    └── DeviceError                 an audio device (sound card) is missing or failed

Every error a client can cause is a ``ProtocolError`` with a machine-readable ``code``;
transports turn it into an ``error`` event and keep the connection open.  A ``StageError``
ends the current response (status ``failed``) but not the session.
"""

from __future__ import annotations

__all__ = [
    "ChecksumError",
    "ConfigError",
    "DeviceError",
    "EngineError",
    "MissingDependencyError",
    "ModelError",
    "ProtocolError",
    "StageError",
    "VoiceAgentError",
]


class VoiceAgentError(Exception):
    """Base of every error voiceagent raises on purpose."""

    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retryable is not None:
            self.retryable = retryable


class ConfigError(VoiceAgentError):
    """A configuration value is unknown, of the wrong type or out of range."""


class ModelError(VoiceAgentError):
    """A model cannot be found, prepared or loaded."""


class MissingDependencyError(ModelError):
    """An optional dependency is missing; the message names the pip extra that provides it."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"the package {package!r} is not installed; install it with: pip install 'voiceagent[{extra}]'")
        self.package = package
        self.extra = extra


class ChecksumError(ModelError):
    """A prepared model file's sha256 differs from the one recorded in the model catalog."""


class ProtocolError(VoiceAgentError):
    """A client message broke the wire protocol.

    ``code`` is a stable identifier sent to the client (for example ``invalid_json``);
    ``param`` names the offending field where there is one.
    """

    def __init__(self, code: str, message: str, *, param: str | None = None, event_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param
        self.event_id = event_id


class StageError(VoiceAgentError):
    """A model backend failed while processing; the current response fails, the session lives."""

    retryable = True

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage


class EngineError(VoiceAgentError):
    """An LLM engine could not answer: its server is unreachable, answered an HTTP error, broke off
    mid-reply or missed its first-token deadline.  ``retryable``: a later call may work."""

    retryable = True


class DeviceError(VoiceAgentError):
    """An audio device is missing or failed (for example: no sound card, PortAudio not installed)."""
