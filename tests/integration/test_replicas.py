"""Replicas started together keep admitting callers on an idle machine (issue #71, item 0).

A fleet's replicas start at the same moment whenever it is scaled up, restarted or rescheduled.
Each times a turn's work at start-up, and admission builds its first estimate on that figure:
timed while the other replicas loaded their models, it once came out about 20 times too slow
and each replica, idle, refused its third caller.  Here three real ``voiceagent serve``
processes start at the same instant on this machine (as a compose file scales them) and each
must then admit four quiet callers while nothing talks.

Runs alone (``serial``): the claim is about an idle machine, which a parallel run is not."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.integration.serve_process import ServeProcess

pytestmark = [pytest.mark.models, pytest.mark.serial]

REPLICAS = 3
CALLERS = 4
READY_S = 600.0
"""A guard for three start-ups sharing two cores (each about 20 s alone), never a measurement."""


@contextmanager
def replicas(n: int) -> Iterator[list[ServeProcess]]:
    """``n`` replicas started at the same instant, once all are ready."""
    with ExitStack() as stack:
        started = [ServeProcess() for _ in range(n)]
        for replica in started:
            stack.callback(replica.stop)
        for replica in started:
            assert replica.ready.wait(READY_S) and replica.started, replica.output()
        yield started


async def quiet_callers(url: str, n: int) -> list[str]:
    """Open ``n`` Realtime sessions that say nothing, all held open together; each one's first
    event type (``session.created`` when admitted; a refusal raises at the handshake)."""
    async with contextlib.AsyncExitStack() as stack:
        firsts = []
        for _ in range(n):
            ws = await stack.enter_async_context(connect(url, max_size=None, open_timeout=30))
            first = json.loads(await asyncio.wait_for(ws.recv(), 30))
            firsts.append(str(first["type"]))
        return firsts


def _busy_share(lines: list[str]) -> float:
    """The contention of the turn cost a replica kept (from its start-up log)."""
    for line in lines:
        if "turn cost on this machine:" in line and (m := re.search(r"'contention': ([0-9.]+)", line)):
            return float(m.group(1))
    raise AssertionError("no turn cost line in the start-up log:\n" + "".join(lines[-40:]))


def test_replicas_started_together_each_admit_four_quiet_callers_on_an_idle_machine(run: Any) -> None:
    with replicas(REPLICAS) as fleet:
        for replica in fleet:
            assert run(quiet_callers(replica.url, CALLERS)) == ["session.created"] * CALLERS, replica.output()
        shares = [_busy_share(r.lines) for r in fleet]
        # They loaded together but warmed up one at a time with nobody loading beside them (the
        # start-up lock), so each kept a turn cost measured on a quiet machine: its own speed,
        # the figure admission, the burst capacity and the profile choice stand on.
        assert all(s < 0.25 for s in shares), shares
        choices = [next((line.strip() for line in r.lines if line.startswith("profile auto: ")), "") for r in fleet]
        assert len({c.split(",")[0] for c in choices}) == 1, choices  # the same profile on every replica
        assert not any("not recorded" in c for c in choices), choices
