"""OpenAI's call-control API at its seams: the webhook's signature as the ``openai`` package
checks it, the SIP headers the gateway reads from an INVITE, the after-stream refusal the
gateway obeys, and a gateway call (a real bridge and server, scripted engines) that rings until
the application's HTTP accept, reject or silence decides it."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import http.server
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from tests.conftest import SCALE
from tests.unit.fakes import FakeEngines, FakeLlm, FakeStt
from voiceagent.config import SIP_CALLS_LIMIT, Config, ServerConfig
from voiceagent.errors import ConfigError
from voiceagent.sip.bridge import CallBridge, Next, next_step
from voiceagent.sip.gateway import invite_headers
from voiceagent.transports.phone_calls import valid_uri
from voiceagent.transports.server import VoiceAgentServer
from voiceagent.transports.twilio_codec import after_stream_twiml
from voiceagent.transports.webhooks import WebhookError, deliver, incoming_call, incoming_live, signed_headers

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
Run = Callable[..., Any]


def test_the_webhook_is_signed_as_the_openai_package_checks_it() -> None:
    event = incoming_call("rtc_1", [("From", "<sip:alice@pbx>"), ("To", "<sip:agent@here>")])
    body = json.dumps(event).encode()
    client = openai.OpenAI(api_key="x")
    unwrapped = client.webhooks.unwrap(body, signed_headers(SECRET, body), secret=SECRET)
    assert unwrapped.type == "realtime.call.incoming"
    assert unwrapped.data.call_id == "rtc_1" and [h.name for h in unwrapped.data.sip_headers] == ["From", "To"]
    other = "whsec_" + base64.b64encode(b"another secret, thirty-two bytes").decode()
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.unwrap(body, signed_headers(other, body), secret=SECRET)
    with pytest.raises(openai.InvalidWebhookSignatureError):  # a replay, an hour late
        client.webhooks.unwrap(body, signed_headers(SECRET, body, timestamp=int(unwrapped.created_at) - 3600), secret=SECRET)


def test_the_gpt_live_webhook_of_the_same_call_is_the_one_the_openai_package_knows() -> None:
    event = incoming_live("live_1", [("From", "<sip:alice@pbx>")])
    body = json.dumps(event).encode()
    unwrapped = openai.OpenAI(api_key="x").webhooks.unwrap(body, signed_headers(SECRET, body), secret=SECRET)
    assert unwrapped.type == "live.transport.incoming"
    assert (unwrapped.data.type, unwrapped.data.session_id) == ("sip", "live_1")
    assert [(h.name, h.value) for h in unwrapped.data.sip_headers] == [("From", "<sip:alice@pbx>")]


def test_the_webhook_events_are_realtimes_gpt_lives_or_both() -> None:
    assert ServerConfig(sip_webhook_events="live.transport.incoming").sip_webhook_events == "live.transport.incoming"
    for bad in ("realtime.call.ringing", " , ", "live.transport.incoming,live.call.incoming"):
        with pytest.raises(ConfigError, match="sip_webhook_events"):
            ServerConfig(sip_webhook_events=bad)


def test_more_calls_than_the_packaged_pjsip_holds_are_refused_at_start_up() -> None:
    assert ServerConfig().sip_max_calls == SIP_CALLS_LIMIT == 4
    with pytest.raises(ConfigError, match="at most 4 calls"):
        ServerConfig(sip_port=5060, sip_max_calls=5)
    assert ServerConfig(sip_max_calls=16).sip_max_calls == 16  # SIP off: an older config still serves


def test_a_webhook_url_needs_a_secret_and_a_whsec_secret_is_base64() -> None:
    with pytest.raises(ConfigError, match="sip_webhook_secret"):
        ServerConfig(sip_webhook_url="http://app.example/hook")
    with pytest.raises(ConfigError, match="base64"):
        ServerConfig(sip_webhook_url="http://app.example/hook", sip_webhook_secret="whsec_not*base64")


def test_the_invites_headers_are_read_in_order_with_credentials_left_out() -> None:
    invite = (
        "INVITE sip:agent@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK1\r\nFrom: <sip:alice@pbx>;tag=1\r\n"
        "To: <sip:agent@10.0.0.2>\r\nX-Account: 42,\r\n 43\r\nAuthorization: Digest secret\r\nVia: SIP/2.0/UDP 10.0.0.9\r\n"
        "\r\nv=0\r\nFrom: not a header\r\n"
    )
    assert invite_headers(invite) == [
        ("Via", "SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK1"),
        ("From", "<sip:alice@pbx>;tag=1"),
        ("To", "<sip:agent@10.0.0.2>"),
        ("X-Account", "42, 43"),
        ("Via", "SIP/2.0/UDP 10.0.0.9"),
    ]


def test_a_refusal_after_the_stream_is_the_status_the_application_gave() -> None:
    assert next_step(after_stream_twiml(None, 486)) == Next(refuse=486)
    assert next_step(after_stream_twiml(None, 480)) == Next(refuse=480)
    assert next_step(after_stream_twiml(None, 603)) == Next(refuse=603)
    assert next_step('<Response><Reject reason="busy"/></Response>') == Next(refuse=486)  # Twilio's own form
    assert next_step("<Response><Reject/></Response>") == Next(refuse=603)


# ---------------------------------------------------------------------- a gateway call that rings


class _Hooks:
    """The application's webhook endpoint: (type, id) of each event, ``realtime.call.incoming``'s
    ``call_id`` or ``live.transport.incoming``'s ``session_id``."""

    def __init__(self) -> None:
        self.calls: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        calls = self.calls
        client = openai.OpenAI(api_key="x", webhook_secret=SECRET)

        class Hook(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                event = client.webhooks.unwrap(self.rfile.read(int(self.headers["Content-Length"])), dict(self.headers))
                data = event.data
                name = data.session_id if event.type == "live.transport.incoming" else data.call_id  # type: ignore[union-attr]
                loop.call_soon_threadsafe(calls.put_nowait, (event.type, name))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


async def _post(server: VoiceAgentServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    def send() -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, {}
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    return await asyncio.to_thread(send)


@pytest.fixture
def hooked() -> Iterator[Callable[..., Any]]:
    """``ringing(run, scenario, **server)``: a server with the webhook on, one bridge dialled in;
    ``scenario(server, call_id, opened, ended)`` decides it."""
    fakes = FakeEngines(stt=FakeStt(default="hello"), llm=FakeLlm([], default=("Thank you.",)))

    def ringing(run: Run, scenario: Callable[..., Any], **server: Any) -> Any:
        async def main() -> Any:
            hooks = _Hooks()
            cfg = ServerConfig(port=0, sip_webhook_url=hooks.url, sip_webhook_secret=SECRET, **server)
            try:
                async with VoiceAgentServer(dataclasses.replace(Config(), server=cfg), fakes.engines) as srv:
                    opened = asyncio.Event()
                    ended: asyncio.Future[Next | None] = asyncio.get_running_loop().create_future()
                    bridge = CallBridge(
                        f"ws://127.0.0.1:{srv.port}/twilio",
                        f"http://127.0.0.1:{srv.port}/twilio/twiml/next",
                        "sip9",
                        "sip:caller@127.0.0.1",
                        opened.set,
                        lambda step: ended.done() or ended.set_result(step),
                        [("From", "<sip:caller@127.0.0.1>")],
                    )
                    task = asyncio.create_task(bridge.run())
                    try:
                        # Both APIs' events announce the call (server.sip_webhook_events' default).
                        events = dict([await asyncio.wait_for(hooks.calls.get(), 10 * SCALE) for _ in range(2)])
                        call_id = events["realtime.call.incoming"]
                        call = srv.phone_calls.get(call_id)
                        assert call is not None and events["live.transport.incoming"] == call.live_id
                        return await scenario(srv, call_id, opened, ended)
                    finally:
                        bridge.hung_up()
                        await task
            finally:
                hooks.close()

        return run(main())

    yield ringing
    fakes.close()


def test_a_call_rings_until_accepted_and_a_bad_configuration_leaves_it_ringing(run: Run, hooked: Callable[..., Any]) -> None:
    async def scenario(server: VoiceAgentServer, call_id: str, opened: asyncio.Event, ended: Any) -> None:
        assert not opened.is_set() and server.phone_calls.get(call_id) is not None
        status, error = await _post(server, f"/v1/realtime/calls/{call_id}/accept", {"type": "realtime", "no_such_field": 1})
        assert status == 400 and error["error"]["code"], error
        assert not opened.is_set() and server.phone_calls.get(call_id).state == "ringing"  # type: ignore[union-attr]
        status, _ = await _post(server, f"/v1/realtime/calls/{call_id}/accept", {"type": "realtime", "instructions": "Be brief."})
        assert status == 200
        await asyncio.wait_for(opened.wait(), 10 * SCALE)
        assert server.phone_calls.get(call_id).session.settings.instructions == "Be brief."  # type: ignore[union-attr]
        status, error = await _post(server, f"/v1/realtime/calls/{call_id}/reject", {})
        assert status == 409 and error["error"]["code"] == "invalid_call_state"
        status, error = await _post(server, f"/v1/realtime/calls/{call_id}/refer", {"target_uri": "mailto:x"})
        assert status == 400 and error["error"]["param"] == "target_uri"
        status, _ = await _post(server, f"/v1/realtime/calls/{call_id}/hangup", {})
        assert status == 200
        assert await asyncio.wait_for(ended, 10 * SCALE) == Next(None)

    hooked(run, scenario)


def test_a_call_accepted_on_gpt_live_is_checked_as_gpt_live_checks_and_the_realtime_side_is_closed(
    run: Run, hooked: Callable[..., Any]
) -> None:
    async def scenario(server: VoiceAgentServer, call_id: str, opened: asyncio.Event, ended: Any) -> None:
        call = server.phone_calls.get(call_id)
        assert call is not None
        accept = f"/v1/live/sessions/{call.live_id}/accept"
        live = {"type": "live", "model": "gpt-live-1"}
        refusals = [
            ({}, "missing_required_parameter"),
            ({"session": live, "extra": 1}, "unknown_parameter"),
            ({"session": {**live, "type": "realtime"}}, "invalid_value"),
            ({"session": {"type": "live"}}, "missing_required_parameter"),  # the model
            ({"session": {**live, "audio": {"format": {"type": "audio/pcm", "rate": 24000}}}}, "unknown_parameter"),  # the call's
            ({"session": {**live, "store": True}}, "unsupported_value"),
        ]
        for body, code in refusals:
            status, error = await _post(server, accept, body)
            assert (status, error["error"]["code"]) == (400, code), (body, error)
        assert not opened.is_set() and call.state == "ringing"
        status, _ = await _post(server, accept, {"session": {**live, "instructions": "Be brief."}})
        assert status == 200
        await asyncio.wait_for(opened.wait(), 10 * SCALE)
        assert call.surface == "live" and call.live is not None and call.live.protocol.id == call.live_id
        assert call.session.settings.instructions == "Be brief."
        status, error = await _post(server, f"/v1/realtime/calls/{call_id}/accept", {"type": "realtime"})
        assert status == 409 and error["error"]["code"] == "invalid_call_state"  # the first accept chose GPT-Live
        status, _ = await _post(server, f"/v1/live/sessions/{call.live_id}/hangup", {})
        assert status == 200
        assert await asyncio.wait_for(ended, 10 * SCALE) == Next(None)
        status, error = await _post(server, f"/v1/live/sessions/{call.live_id}/hangup", {})
        assert status == 404 and error["error"]["code"] == "call_not_found"

    hooked(run, scenario)


@pytest.mark.parametrize(("body", "refused"), [({"status_code": 486}, 486), ({}, 603)])
def test_a_rejected_call_is_refused_with_its_status_and_never_answered(
    run: Run, hooked: Callable[..., Any], body: dict[str, Any], refused: int
) -> None:
    async def scenario(server: VoiceAgentServer, call_id: str, opened: asyncio.Event, ended: Any) -> None:
        status, _ = await _post(server, f"/v1/realtime/calls/{call_id}/reject", body)
        assert status == 200
        assert await asyncio.wait_for(ended, 10 * SCALE) == Next(refuse=refused)
        assert not opened.is_set()
        status, _ = await _post(server, f"/v1/realtime/calls/{call_id}/accept", {"type": "realtime"})
        assert status == 404  # gone with its stream

    hooked(run, scenario)


def test_a_call_nobody_answers_is_refused_480(run: Run, hooked: Callable[..., Any]) -> None:
    async def scenario(server: VoiceAgentServer, call_id: str, opened: asyncio.Event, ended: Any) -> None:
        assert await asyncio.wait_for(ended, 10 * SCALE) == Next(refuse=480)
        assert not opened.is_set()

    hooked(run, scenario, sip_accept_timeout_s=0.5)


def test_a_target_that_could_carry_a_header_of_its_own_is_refused() -> None:
    assert valid_uri("sip:desk@pbx.example:5060;transport=tcp") and valid_uri("tel:+15551234567")
    assert not valid_uri("sip:desk@pbx.example\r\nX-Evil: 1")
    assert not valid_uri("sip:desk @pbx.example")
    assert not valid_uri("mailto:desk@pbx.example")
    assert not valid_uri("sip:" + "a" * 300)
    assert not valid_uri(None)


def test_a_webhook_answered_with_a_redirect_is_not_delivered() -> None:
    class Moved(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)  # urllib would follow it as a GET, the event left behind
            self.send_header("Location", "/elsewhere")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Moved)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(WebhookError, match="302"):
            deliver(f"http://127.0.0.1:{httpd.server_address[1]}/hook", SECRET, incoming_call("rtc_1", []))
    finally:
        httpd.shutdown()
        httpd.server_close()
