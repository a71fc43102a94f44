"""Registering the gateway at a PBX or SIP trunk (``server.sip_register``), with digest credentials.

A trunk or PBX that does not route to a fixed address wants its extension to REGISTER: the
gateway then tells the registrar where it is (and again before each registration expires), and
the registrar sends that extension's calls here.  The account is ``sip:user@registrar[:port]``;
the digest user is the URI's user unless ``server.sip_auth_user`` names another (trunks often
give a separate authentication name), and the password comes from the environment
(:data:`PASSWORD_ENV`), never from a command line or a config file that ``ps`` or a repository
would show.  The registrar's own address may call (it joins the allow-list): a registered
extension's calls come from it.

Pure functions and one small callback; the gateway (:mod:`.gateway`) owns PJSIP.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import Any

__all__ = ["PASSWORD_ENV", "REGISTERED", "Registration", "describe", "parse_register"]

PASSWORD_ENV = "VOICEAGENT_SIP_PASSWORD"
REGISTERED = "sip gateway: registered"
"""The start of the line the gateway prints when a registration is accepted."""

_URI = re.compile(r"^(sips?):([^@\s:;<>\"]+)@(\[[0-9a-fA-F:.]+\]|[^@\s:;<>\"\[\]]+)(?::([0-9]{1,5}))?$")
EXPIRES_S = 300
"""Asked of the registrar; PJSIP registers again before it runs out."""
RETRY_S = 30
"""After a refused or unanswered registration, the next try."""


@dataclass(frozen=True)
class Registration:
    """Where and as whom the gateway registers."""

    uri: str
    """The account, ``sip:user@registrar[:port]``."""
    user: str
    """The digest user name."""
    host: str
    port: int | None
    scheme: str = "sip"

    @property
    def registrar(self) -> str:
        """The registrar's URI (the account's host and port)."""
        return f"{self.scheme}:{self.host}" + (f":{self.port}" if self.port else "")

    def addresses(self) -> list[str]:
        """The registrar's addresses (resolved once, at start): they may call the gateway."""
        host = self.host.strip("[]")
        try:
            infos = socket.getaddrinfo(host, self.port or 5060, proto=socket.IPPROTO_UDP)
        except OSError:
            return []
        return sorted({str(info[4][0]) for info in infos})

    def configure(self, lib: Any, acfg: Any, password: str) -> None:
        """Fill PJSIP's ``AccountConfig`` ``acfg``: identity, registrar, digest credentials."""
        acfg.idUri = self.uri
        acfg.regConfig.registrarUri = self.registrar
        acfg.regConfig.timeoutSec = EXPIRES_S
        acfg.regConfig.retryIntervalSec = RETRY_S
        acfg.regConfig.firstRetryIntervalSec = RETRY_S
        # realm "*": answer whichever realm the registrar challenges with.
        acfg.sipConfig.authCreds.append(lib.AuthCredInfo("digest", "*", self.user, 0, password))


def parse_register(uri: str, auth_user: str = "") -> Registration:
    """``server.sip_register`` read; raises ``ValueError`` saying what is wrong with it."""
    match = _URI.match(uri.strip())
    if match is None:
        raise ValueError(f"{uri!r} is not sip:user@registrar[:port]")
    scheme, user, host, port = match.groups()
    if port is not None and not 0 < int(port) < 65536:
        raise ValueError(f"{uri!r} has port {port}, outside 1..65535")
    return Registration(uri.strip(), auth_user.strip() or user, host, int(port) if port else None, scheme)


def describe(code: int, reason: str, expiration: int, registrar: str) -> str:
    """The line the gateway prints about a registration's outcome (``onRegState``)."""
    if 200 <= code < 300 and expiration > 0:
        return f"{REGISTERED} at {registrar} ({code} {reason}, for {expiration} s)"
    if 200 <= code < 300:
        return f"sip gateway: unregistered from {registrar}"
    return f"sip gateway: registration at {registrar} failed: {code} {reason} (tried again in {RETRY_S} s)"
