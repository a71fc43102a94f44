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

Errors are bounded: a ``ProtocolError`` keeps at most :data:`MAX_MESSAGE_CHARS` of its message
and :data:`MAX_FIELD_CHARS` of its ``param`` and ``event_id``, and what it quotes of the client's
input goes through :func:`excerpt`, so an error never echoes back a large message that caused
it (a 200 KB ``type`` once drew a 2.4 MB ``error`` event).
"""

from __future__ import annotations

__all__ = [
    "MAX_FIELD_CHARS",
    "MAX_MESSAGE_CHARS",
    "ChecksumError",
    "ConfigError",
    "DeviceError",
    "EngineError",
    "MissingDependencyError",
    "ModelError",
    "ProtocolError",
    "StageError",
    "VoiceAgentError",
    "bounded",
    "excerpt",
]

MAX_MESSAGE_CHARS = 400
"""The longest ``message`` a :class:`ProtocolError` carries (longer ones are cut, marked)."""
MAX_FIELD_CHARS = 128
"""The longest ``param`` or ``event_id`` a :class:`ProtocolError` carries."""


def bounded(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its start and how much was left out."""
    if len(text) <= limit:
        return text
    cut = f"... ({len(text) - limit + 32} more characters)"
    return text[: max(0, limit - len(cut))] + cut


def excerpt(value: object, limit: int = 64) -> str:
    """``repr(value)``, cut to about ``limit`` characters: how an error quotes client input.
    Cut before repr is taken, so a huge string costs no huge repr either."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + f"... ({len(value)} characters)"
    return bounded(repr(value), limit + 32)


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
        super().__init__(bounded(message, MAX_MESSAGE_CHARS))
        self.code = code
        self.param = param
        self.event_id = event_id

    @property
    def param(self) -> str | None:
        return self._param

    @param.setter
    def param(self, value: str | None) -> None:
        self._param = None if value is None else bounded(value, MAX_FIELD_CHARS)

    @property
    def event_id(self) -> str | None:
        """The client's event this error answers (cut to :data:`MAX_FIELD_CHARS`)."""
        return self._event_id

    @event_id.setter
    def event_id(self, value: str | None) -> None:
        self._event_id = None if value is None else bounded(value, MAX_FIELD_CHARS)


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
