"""``voiceagent call``: ask a running server to place a SIP call and follow it to its end.

The server's own HTTP API (``POST /v1/sip/calls``, then ``GET /v1/sip/calls/{id}``); the call
runs on the server, as an answered incoming call does, so this command only reports.  Blocking
(``urllib``): it is a command, not a library call.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

__all__ = ["CallNotPlacedError", "place_and_follow"]

POLL_S = 0.25


class CallNotPlacedError(Exception):
    """The server refused to place the call: its message."""


def _request(url: str, token: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace")
        try:
            text = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            text = text.strip()
        raise CallNotPlacedError(f"{exc.code}: {text}") from None
    except (OSError, ValueError) as exc:
        raise CallNotPlacedError(f"cannot reach {url}: {exc}") from None


def place_and_follow(
    server: str,
    to: str,
    *,
    session: dict[str, Any] | None = None,
    timeout_s: float = 30,
    token: str = "",
    say: Callable[[str], None] = print,
    machine_detection: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Place the call through ``server`` (``http://HOST:PORT``), ``say`` each change of its status
    (and, with ``machine_detection``, who answered), and return its last record (``status``
    "ended", with ``sip_status`` and ``reason``)."""
    base = server.rstrip("/").replace("ws://", "http://").replace("wss://", "https://").removesuffix("/v1/realtime")
    body: dict[str, Any] = {"to": to, "timeout_s": timeout_s, **({"session": session} if session else {})}
    if machine_detection is not None:
        body["machine_detection"] = machine_detection
    record = _request(f"{base}/v1/sip/calls", token, body)
    say(f"{record['id']}: {record['status']} {to}")
    last = record["status"]
    answered = False
    told = None
    while record["status"] != "ended":
        time.sleep(POLL_S)
        record = _request(f"{base}/v1/sip/calls/{record['id']}", token)
        answered = answered or record["status"] == "answered"
        if record["status"] != last:
            last = record["status"]
            detail = " ".join(str(x) for x in (record.get("sip_status"), record.get("reason")) if x)
            say(f"{record['id']}: {last}" + (f" ({detail})" if detail else ""))
        if record.get("answered_by") and record["answered_by"] != told:
            told = record["answered_by"]  # a person's verdict may turn into a machine's: said again
            say(_answered_by(record))
    record["answered"] = answered
    return record


def _answered_by(record: dict[str, Any]) -> str:
    reasons = "; ".join(record.get("answered_by_reasons") or [])
    return f"{record['id']}: answered by {record['answered_by']} after {(record.get('answered_by_ms') or 0) / 1000:.1f} s ({reasons})"
