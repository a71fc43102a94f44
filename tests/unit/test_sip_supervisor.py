"""The SIP gateway's supervisor before any call: the port checked before the models load, and the
server's token kept off the child's command line."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from tests.ports import free_port
from voiceagent.errors import MissingDependencyError
from voiceagent.sip import gateway
from voiceagent.sip.supervisor import READY, TOKEN_ENV, SipGateway, SipGatewayError, check_port


@pytest.mark.parametrize("kind", [socket.SOCK_DGRAM, socket.SOCK_STREAM])
def test_a_port_taken_over_udp_or_tcp_is_the_gateways_one_line(kind: int) -> None:
    with socket.socket(socket.AF_INET, kind) as taken:
        taken.bind(("127.0.0.1", 0))
        if kind == socket.SOCK_STREAM:
            taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SipGatewayError) as err:
            check_port("127.0.0.1", port)
    assert err.value.message == f"the SIP gateway did not start: sip gateway: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_a_free_port_passes_and_stays_free() -> None:
    # Free for UDP and TCP, away from the ephemeral range: a UDP port the kernel chose was once
    # held over TCP by one of the run's own connections.
    port = free_port()
    check_port("127.0.0.1", port)
    check_port("127.0.0.1", port)  # the probe let go of it


def test_an_address_this_machine_does_not_have_is_refused() -> None:
    with pytest.raises(SipGatewayError, match=r"cannot listen on 192\.0\.2\.1:5060"):
        check_port("192.0.2.1", 5060)  # TEST-NET-1: never a local address


def test_the_token_reaches_the_child_in_its_environment_not_on_its_command_line() -> None:
    gateway = SipGateway("127.0.0.1", 5060, "ws://127.0.0.1:8765", "127.0.0.1", 4, token="s3cret")
    assert "s3cret" not in " ".join(gateway.args)
    # A stand-in child that says it listens, and what it was given.
    child = f"import os, sys, time; print('{READY} token=' + os.environ['{TOKEN_ENV}'] + ' argv=' + repr(sys.argv), flush=True)"
    gateway.args = ["-c", child + "; time.sleep(60)"]

    async def scenario() -> str:
        await gateway.start()
        try:
            return gateway.ready_line
        finally:
            await gateway.stop()

    line = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert "token=s3cret argv=" in line and "s3cret" not in line.split("argv=")[1]


@pytest.mark.parametrize("on", [True, False])
def test_the_echo_cancellation_setting_reaches_the_gateway_s_command_line(on: bool) -> None:
    gateway = SipGateway("127.0.0.1", 5060, "ws://127.0.0.1:8765", "127.0.0.1", 4, echo_cancellation=on)
    at = gateway.args.index("--echo-cancellation")
    assert gateway.args[at + 1] == ("on" if on else "off")


def test_a_gateway_asked_to_cancel_echo_without_livekit_stops_in_one_line(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    def missing(extra: str = "clients") -> Any:
        raise MissingDependencyError("livekit", extra)

    monkeypatch.setattr(gateway, "livekit_rtc", missing)
    assert gateway.main(["--port", "5060", "--echo-cancellation", "on"]) == 2
    assert capsys.readouterr().out.strip() == (
        "sip gateway: the package 'livekit' is not installed; install it with: pip install 'voiceagent[sip]'"
    )
