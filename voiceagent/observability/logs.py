"""Logging set-up: the level and the format (``text`` or ``json``) come from the configuration.

In ``json`` every record is one JSON object on one line (``time``, ``level``, ``logger``,
``message``); a record whose message is already a JSON object (the per-turn line, the ``ready``
line) is merged into it instead of being quoted, so a log shipper sees its fields.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["JsonFormatter", "configure"]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        parsed: Any = None
        if message.startswith("{"):
            try:
                parsed = json.loads(message)
            except ValueError:
                parsed = None
        if isinstance(parsed, dict):
            out.update(parsed)
        else:
            out["message"] = message
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure(level: str, fmt: str) -> None:
    """Send the root logger's records to stderr at ``level`` in ``fmt`` (replacing earlier set-up)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
