"""Who may call: source addresses (a list of networks) that an INVITE must come from.

A SIP caller's own headers (From, Contact) are claims anyone can write; the address the packet
came from is not (over TCP it is the connection's peer; over UDP it can be spoofed only by a sender
that gives up the answer, which then goes to the real address).  A trunk or PBX is admitted by
its address; anything else is refused with 403 before any session exists.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

__all__ = ["AllowList", "source_host"]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class AllowList:
    """Networks written as ``"127.0.0.1"``, ``"10.0.0.0/8"`` or ``"::1"``; ``"*"`` admits every
    address.  Raises ``ValueError`` naming the entry that is not an address or network."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.any = False
        self.networks: list[_Network] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            if entry == "*":
                self.any = True
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                raise ValueError(f"not an address or network: {entry!r}") from None

    def admits(self, host: str) -> bool:
        """Whether a packet from ``host`` (an address, no port) may start a call."""
        if self.any:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)


def source_host(src: str) -> str:
    """The address part of PJSIP's ``"host:port"`` source (``"[::1]:5060"`` for IPv6)."""
    if src.startswith("["):
        return src[1 : src.index("]")]
    host, sep, port = src.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else src
