"""Field checks shared by the wire codecs (pure: no I/O)."""

from __future__ import annotations

import json
from typing import Any

from voiceagent.errors import ProtocolError

__all__ = ["parse_object", "require_str"]


def require_str(msg: dict[str, Any], key: str, param: str) -> str:
    """``msg[key]`` as a string, else a ProtocolError (``missing_field`` / ``invalid_value``) naming ``param``."""
    value = msg.get(key)
    if not isinstance(value, str):
        raise ProtocolError("invalid_value" if key in msg else "missing_field", f"'{param}' must be a string", param=param)
    return value


def parse_object(text: str, what: str) -> dict[str, Any]:
    """One JSON text frame as an object, else ``invalid_json`` / ``invalid_event`` (``what`` names it)."""
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError) as exc:
        # ValueError besides JSONDecodeError: an integer of more digits than Python converts
        raise ProtocolError("invalid_json", f"message is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(msg, dict):
        raise ProtocolError("invalid_event", f"{what} must be a JSON object")
    if "\\u" in text:
        try:
            json.dumps(msg, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            # JSON may escape a lone surrogate (\ud800): not text, and no model or log can encode it
            raise ProtocolError("invalid_json", "message contains a lone UTF-16 surrogate escape, not valid Unicode text") from None
        except RecursionError:
            # Nested just below the parser's limit: re-encoding it one call deeper passes the limit.
            raise ProtocolError("invalid_json", "message is nested too deeply") from None
    return msg
