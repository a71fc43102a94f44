"""Field checks shared by the wire codecs (pure: no I/O)."""

from __future__ import annotations

from typing import Any

from voiceagent.errors import ProtocolError

__all__ = ["require_str"]


def require_str(msg: dict[str, Any], key: str, param: str) -> str:
    """``msg[key]`` as a string, else a ProtocolError (``missing_field`` / ``invalid_value``) naming ``param``."""
    value = msg.get(key)
    if not isinstance(value, str):
        raise ProtocolError("invalid_value" if key in msg else "missing_field", f"'{param}' must be a string", param=param)
    return value
