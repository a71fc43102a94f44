"""The public API is pinned: a change to it must change this test too."""

from __future__ import annotations

import voiceagent
from voiceagent import errors

EXPECTED = [
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


def test_all_is_pinned() -> None:
    assert voiceagent.__all__ == EXPECTED


def test_every_public_name_exists() -> None:
    for name in voiceagent.__all__:
        assert getattr(voiceagent, name) is not None, name
    assert isinstance(voiceagent.__version__, str)


def test_star_import_exports_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from voiceagent import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(EXPECTED)


def test_error_tree() -> None:
    assert issubclass(voiceagent.ConfigError, voiceagent.VoiceAgentError)
    assert issubclass(voiceagent.ModelError, voiceagent.VoiceAgentError)
    assert issubclass(voiceagent.ProtocolError, voiceagent.VoiceAgentError)
    assert issubclass(voiceagent.StageError, voiceagent.VoiceAgentError)
    assert issubclass(errors.MissingDependencyError, voiceagent.ModelError)
    assert issubclass(errors.ChecksumError, voiceagent.ModelError)
    assert issubclass(errors.DeviceError, voiceagent.VoiceAgentError)
    assert errors.StageError("llm", "boom").retryable is True
    assert errors.ProtocolError("invalid_json", "bad").retryable is False
    missing = errors.MissingDependencyError("piper", "cpu")
    assert "pip install 'voiceagent[cpu]'" in str(missing)
    assert errors.VoiceAgentError("x", retryable=True).retryable is True
