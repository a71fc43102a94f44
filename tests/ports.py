"""Ports for the servers and programs the tests start, chosen so that nothing else takes them.

A port asked of the kernel (``bind(("127.0.0.1", 0))``) comes from the ephemeral range, which
every outgoing connection of every process on the machine draws from too: between the moment a
test reads such a port and the moment its program binds it, a client elsewhere in a parallel run
could take it (baresip once failed so, its SIP-over-TLS port, the SIP port plus one, taken).
These ports come from below that range, where only explicit binds go, and each test process
draws from its own block (by its xdist worker), so two processes never offer the same one.  Each
port is checked free for both TCP and UDP, with as many following ports as ``span`` asks for.
"""

from __future__ import annotations

import os
import random
import socket

_FIRST, _BLOCK, _BLOCKS = 16000, 2000, 8  # 16000-31999: below Linux's ephemeral range (32768-)


def _block() -> int:
    """This process's block: xdist's worker gwN draws from block N; a run without workers, from the last."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else _BLOCKS - 1
    return _FIRST + _BLOCK * (index % _BLOCKS)


# Where this process's next port is looked for: a random start in the block (a test process
# started twice in a row does not offer the ports of the one before, whose programs may still be
# letting them go), and past every port handed out (a program may not have bound it yet).
_next = random.randrange(_BLOCK)


def _free(port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port(span: int = 1) -> int:
    """A loopback port free for TCP and UDP, with the ``span - 1`` ports after it free as well."""
    global _next
    base = _block()
    for _ in range(_BLOCK):
        start, _next = _next % (_BLOCK - span), _next + span
        if all(_free(base + start + k) for k in range(span)):
            return base + start
    raise RuntimeError(f"no free run of {span} ports in {base}-{base + _BLOCK - 1}")
