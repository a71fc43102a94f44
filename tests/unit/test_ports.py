"""The test ports: below the ephemeral range, one block per test process, free for TCP and UDP."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests import ports


def test_ports_come_from_below_the_ephemeral_range_and_are_never_offered_twice() -> None:
    given = [ports.free_port() for _ in range(50)]
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(ports._FIRST <= p < low for p in given), given
    assert len(set(given)) == len(given)


def test_a_span_is_free_for_tcp_and_udp_and_a_taken_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    # From the block's start: a random start near its end would wrap the ports looked at below
    # back to the block's beginning.
    monkeypatch.setattr(ports, "_next", 0)
    first = ports.free_port(span=2)
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # UDP alone: a SIP phone's port
    taken.bind(("127.0.0.1", first + 3))
    try:
        monkeypatch.setattr(ports, "_next", first + 2 - ports._block())
        got = ports.free_port(span=2)  # first + 2 would put its second port on the taken one
        assert got not in (first + 2, first + 3) and got >= first + 4, (first, got)
        for port in (got, got + 1):
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                with socket.socket(socket.AF_INET, kind) as sock:
                    sock.bind(("127.0.0.1", port))
    finally:
        taken.close()


def test_each_xdist_worker_has_its_own_block(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = set()
    for worker in ("gw0", "gw1", "gw2", ""):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        blocks.add(ports._block())
    assert len(blocks) == 4
