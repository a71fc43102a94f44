"""Who may open a session: tokens and browser origins, checked at the WebSocket handshake (pure).

Rules (the server applies them in ``process_request``, before any session work):

* **Token.**  When auth is on, an upgrade must carry one of the accepted tokens, as
  ``Authorization: Bearer <token>``, as a WebSocket subprotocol ``openai-insecure-api-key.<token>``
  (how the OpenAI Realtime API lets browsers, which cannot set headers, authenticate), or in the
  URL: ``?token=<token>``, or a last path segment (``/twilio/<token>``: Twilio's stream URL takes no
  query string).  Otherwise HTTP 401.  Tokens are compared in constant time.
* **Origin.**  A browser always sends ``Origin``; it must be the server's own (the ``Host`` the
  browser asked for) or one of ``server.allowed_origins``, else HTTP 403.  This stops a page on
  another site from talking to a server on the user's machine.  Requests without ``Origin``
  (SDKs, Twilio, the CLI) are not browser requests and pass.
* **When auth is on.**  ``server.auth = "auto"`` turns it on when the server binds a public
  address or tokens are configured; ``on`` and ``off`` force it.  On with no configured token, one is generated.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from websockets.datastructures import Headers

from voiceagent.config import ServerConfig

__all__ = ["SUBPROTOCOL", "TOKEN_SUBPROTOCOL_PREFIX", "Access", "Refusal", "access_for", "is_loopback"]

SUBPROTOCOL = "realtime"
"""The subprotocol the server selects when a client offers it (browsers need one selected when
they offer any)."""
TOKEN_SUBPROTOCOL_PREFIX = "openai-insecure-api-key."


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str


@dataclass(frozen=True)
class Access:
    """The handshake rules of one server."""

    tokens: tuple[str, ...]
    """Accepted tokens; empty: auth is off."""
    origins: tuple[str, ...] = ()
    generated: bool = False
    """The token was generated at start-up (none was configured)."""

    @property
    def required(self) -> bool:
        return bool(self.tokens)

    def check(self, path: str, headers: Headers) -> Refusal | None:
        """None if the upgrade may go on; else the HTTP status and a one-line reason."""
        origin = headers.get("Origin")
        if origin is not None and not self._origin_ok(origin, headers.get("Host")):
            return Refusal(403, f"origin {origin} is not allowed: add it to server.allowed_origins")
        if self.required and not self._token_ok(path, headers):
            return Refusal(
                401,
                "a token is required: send 'Authorization: Bearer <token>', the subprotocol "
                f"'{TOKEN_SUBPROTOCOL_PREFIX}<token>', or ?token=<token>",
            )
        return None

    def _origin_ok(self, origin: str, host: str | None) -> bool:
        if "*" in self.origins or origin in self.origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and host is not None and parts.netloc.lower() == host.lower()

    def _token_ok(self, path: str, headers: Headers) -> bool:
        return self.token_in(path, headers) is not None

    def token_in(self, path: str, headers: Headers) -> str | None:
        """The accepted token the request carries, if any."""
        return next((c for c in candidates(path, headers) if self._match(c)), None)

    def _match(self, candidate: str) -> bool:
        ok = False
        for token in self.tokens:  # every token is compared: the time does not say which one matched
            ok |= hmac.compare_digest(candidate.encode("utf-8", "surrogateescape"), token.encode("utf-8"))
        return ok


def candidates(path: str, headers: Headers) -> list[str]:
    """Every token a request offers (header, subprotocols, query, last path segment)."""
    found: list[str] = []
    auth = headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        found.append(auth[7:].strip())
    for value in headers.get_all("Sec-WebSocket-Protocol"):
        found += [p.strip()[len(TOKEN_SUBPROTOCOL_PREFIX) :] for p in value.split(",") if p.strip().startswith(TOKEN_SUBPROTOCOL_PREFIX)]
    parts = urlsplit(path)
    found += parse_qs(parts.query).get("token", [])
    segments = [s for s in parts.path.split("/") if s]
    if len(segments) == 2 and segments[0] == "twilio" and segments[1] != "twiml":
        found.append(segments[1])
    return found


def access_for(cfg: ServerConfig) -> Access:
    """The rules ``cfg`` asks for; a token is generated when auth is on and none is configured."""
    tokens = tuple(t.strip() for t in cfg.auth_tokens.split(",") if t.strip())
    origins = tuple(o.strip().rstrip("/") for o in cfg.allowed_origins.split(",") if o.strip())
    # auto: on for a public address, and wherever the user configured tokens (they meant it)
    on = cfg.auth == "on" or (cfg.auth == "auto" and (bool(tokens) or not is_loopback(cfg.host)))
    if not on:
        return Access((), origins)
    if tokens:
        return Access(tokens, origins)
    return Access((secrets.token_urlsafe(18),), origins, generated=True)
