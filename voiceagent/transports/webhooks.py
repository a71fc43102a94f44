"""Webhooks as OpenAI sends them: a phone call's ``realtime.call.incoming`` (Realtime) and
``live.transport.incoming`` (GPT-Live) events, signed the Standard Webhooks way, so that an
application's ``client.webhooks.unwrap(body, headers)`` (the ``openai`` package) verifies them
unchanged.

Signature: ``webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` with the
secret's bytes (a ``whsec_`` secret is base64 after its prefix), beside ``webhook-id`` and
``webhook-timestamp`` (Unix seconds).

:func:`deliver` is blocking (``urllib``): callers run it in an executor.
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import hmac
import json
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

__all__ = ["WEBHOOK_POOL", "WebhookError", "check_secret", "deliver", "incoming_call", "incoming_live", "signed_headers"]

TIMEOUT_S = 10.0
"""How long the application has to take the webhook (its answer's body is not read)."""
WEBHOOK_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook")
"""The threads :func:`deliver` runs on: apart from the default executor, which the engines use."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is a failure: urllib would turn the POST into a GET without its body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class WebhookError(Exception):
    """The webhook could not be delivered: the reason, for the log."""


def check_secret(secret: str) -> bytes:
    """The signing key of ``secret`` (``whsec_`` + base64, or any other string as its bytes);
    ValueError for a ``whsec_`` secret that is not base64."""
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret[6:], validate=True)
        except ValueError:
            raise ValueError("a whsec_ secret is base64 after its prefix") from None
    return secret.encode()


def signed_headers(secret: str, body: bytes, msg_id: str | None = None, timestamp: int | None = None) -> dict[str, str]:
    """The three Standard Webhooks headers for ``body``."""
    msg_id = msg_id or "wh_" + secrets.token_hex(12)
    ts = str(int(time.time()) if timestamp is None else timestamp)
    mac = hmac.new(check_secret(secret), f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    return {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": "v1," + base64.b64encode(mac).decode()}


def incoming_call(call_id: str, sip_headers: Sequence[tuple[str, str]], media_security: str = "rtp") -> dict[str, Any]:
    """The ``realtime.call.incoming`` event of ``call_id`` (the INVITE's headers, in order)."""
    return _incoming("realtime.call.incoming", {"call_id": call_id}, sip_headers, media_security)


def incoming_live(session_id: str, sip_headers: Sequence[tuple[str, str]], media_security: str = "rtp") -> dict[str, Any]:
    """The ``live.transport.incoming`` event of the same ringing call: GPT-Live's name for it is
    ``session_id`` (``live_…``), which its accept, reject, refer, hangup and sideband take."""
    return _incoming("live.transport.incoming", {"type": "sip", "session_id": session_id}, sip_headers, media_security)


def _incoming(kind: str, names: dict[str, str], sip_headers: Sequence[tuple[str, str]], media_security: str) -> dict[str, Any]:
    headers = [{"name": name, "value": value} for name, value in sip_headers]
    data = {**names, "sip_headers": headers, "sip_media_security": media_security}
    return {"object": "event", "id": "evt_" + secrets.token_hex(12), "type": kind, "created_at": int(time.time()), "data": data}


def deliver(url: str, secret: str, event: dict[str, Any]) -> int:
    """POST ``event`` to ``url``, signed; its HTTP status (2xx).  Raises :class:`WebhookError`
    for a refusal (any other status), a timeout or a connection that fails."""
    body = json.dumps(event, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "voiceagent", **signed_headers(secret, body)}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        raise WebhookError(f"{url} answered {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise WebhookError(f"{url}: {exc}") from None
