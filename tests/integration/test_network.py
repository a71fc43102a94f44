"""A server on a network: tokens and origins at the handshake, TLS, per-session limits, the
bad messages a hostile client sent in the field, and SIGTERM draining, over real sockets."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin, Subprotocol

from tests.integration.rt_client import recording
from tests.profile import SERVE_PROFILE, profile_config
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models

TOKEN = "s3cret-token"


def config(**server: Any) -> Any:
    return profile_config({"server.port": "0", **{f"server.{k}": str(v) for k, v in server.items()}})


def http_get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def refused(url: str, **kwargs: Any) -> int:
    with pytest.raises(InvalidStatus) as info:
        await connect(url, **kwargs)
    return info.value.response.status_code


async def opened(ws: ClientConnection) -> dict[str, Any]:
    first: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
    return first


def test_tokens_and_origins_are_checked_at_the_handshake_before_any_session(engines: Any, run: Any) -> None:
    async def main() -> None:
        async with VoiceAgentServer(config(auth_tokens=TOKEN), engines) as server:
            base = f"ws://127.0.0.1:{server.port}"
            own = Origin(f"http://127.0.0.1:{server.port}")
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            assert await refused(base + "/v1/realtime") == 401
            assert await refused(base + "/v1/realtime", additional_headers={"Authorization": "Bearer wrong"}) == 401
            assert await refused(base + "/twilio") == 401
            assert await refused(base + "/v1/realtime", additional_headers=bearer, origin=Origin("https://evil.example")) == 403
            assert server.metrics.sessions_total == 0  # refused before any session work
            async with connect(base + "/v1/realtime", additional_headers=bearer) as ws:
                assert (await opened(ws))["type"] == "session.created"
            # A browser: the token as a subprotocol, from the server's own page origin.
            browser = [Subprotocol("realtime"), Subprotocol(f"openai-insecure-api-key.{TOKEN}")]
            async with connect(base + "/v1/realtime", subprotocols=browser, origin=own) as ws:
                assert ws.subprotocol == "realtime"
                assert (await opened(ws))["type"] == "session.created"
            async with connect(base + f"/v1/realtime?token={TOKEN}") as ws:
                assert (await opened(ws))["type"] == "session.created"
            async with connect(base + f"/twilio/{TOKEN}") as ws:  # Twilio: the token is a path segment
                await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            assert server.metrics.sessions_total == 4
            web = f"http://127.0.0.1:{server.port}"
            assert (await asyncio.to_thread(http_get, web + "/twilio/twiml"))[0] == 401
            status, twiml = await asyncio.to_thread(http_get, web + f"/twilio/twiml?token={TOKEN}")
            assert status == 200 and f"/twilio/{TOKEN}" in twiml
            assert await asyncio.to_thread(http_get, web + "/healthz") == (200, "ok\n")  # probes need no token
            ready_status, ready = await asyncio.to_thread(http_get, web + "/readyz")
            assert ready_status == 200 and re.fullmatch(r"ready load=[01]\.\d\d\n", ready), ready
            await server.wait_idle()

    run(main(), 60)


def test_without_auth_a_foreign_page_still_cannot_open_a_session(engines: Any, run: Any) -> None:
    async def main() -> None:
        async with VoiceAgentServer(config(), engines) as server:
            url = f"ws://127.0.0.1:{server.port}/v1/realtime"
            assert await refused(url, origin=Origin("https://evil.example")) == 403
            async with connect(url) as ws:  # an SDK sends no Origin
                assert (await opened(ws))["type"] == "session.created"

    run(main(), 60)


OPENSSL = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
OPENSSL += ["-addext", "subjectAltName=IP:127.0.0.1"]


def test_tls_with_certfile_and_keyfile(engines: Any, run: Any, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [*OPENSSL, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    trust = ssl.create_default_context(cafile=str(cert))

    async def main() -> None:
        async with VoiceAgentServer(config(certfile=cert, keyfile=key), engines) as server:
            assert server.url.startswith("wss://")
            async with connect(server.url, ssl=trust) as ws:
                assert (await opened(ws))["type"] == "session.created"
            assert await asyncio.to_thread(http_get, f"https://127.0.0.1:{server.port}/healthz", trust) == (200, "ok\n")
            with pytest.raises(ssl.SSLError):  # a client that does not trust it
                await connect(server.url, ssl=ssl.create_default_context())

    run(main(), 60)


def silence_append(seconds: float, event_id: str) -> str:
    pcm = np.zeros(int(24000 * seconds), dtype="<i2")
    return json.dumps({"type": "input_audio_buffer.append", "event_id": event_id, "audio": base64.b64encode(pcm.tobytes()).decode()})


def text_item(text: str, event_id: str = "") -> str:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return json.dumps({"type": "conversation.item.create", "event_id": event_id, "item": item})


def test_audio_faster_than_real_time_history_size_and_idle_clients_are_limited(engines: Any, run: Any) -> None:
    async def main() -> None:
        async with VoiceAgentServer(config(audio_burst_s=1, max_history_items=2, idle_timeout_s=2), engines) as server:
            ws = await connect(server.url)
            rec, pump = await recording(ws)
            for i in range(5):  # 2.5 s of audio at once: about 1 s is the burst allowance
                await ws.send(silence_append(0.5, f"evt_a{i}"))
            refused = await rec.wait_for("error", 10)
            assert refused["error"]["code"] == "input_audio_rate_exceeded"
            assert refused["error"]["event_id"] in {f"evt_a{i}" for i in range(2, 5)}
            for i in range(3):
                await ws.send(text_item(f"note {i}"))
            dropped = await rec.wait_for("conversation.item.deleted", 10)
            first = [e for e in rec.of("conversation.item.added") if e["item"]["content"][0].get("text") == "note 0"]
            assert dropped["item_id"] == first[0]["item"]["id"]
            # Then silence from the client: the idle limit ends the session with a reason.
            idle = await rec.wait_for("error", 20, start=rec.events.index(dropped))
            assert idle["error"]["code"] == "session_idle"
            await pump
            assert ws.close_code == 1008
            await server.wait_idle()

    run(main(), 60)


def test_a_session_past_its_maximum_length_is_ended_with_a_reason(engines: Any, run: Any) -> None:
    async def main() -> None:
        async with VoiceAgentServer(config(max_session_s=1.5, idle_timeout_s=0), engines) as server:
            ws = await connect(server.url)
            rec, pump = await recording(ws)
            ended = await rec.wait_for("error", 20)
            assert ended["error"]["code"] == "session_expired"
            await pump
            assert ws.close_code == 1008

    run(main(), 60)


def test_the_bad_messages_found_in_the_field_get_errors_that_echo_their_event_and_the_session_goes_on(engines: Any, run: Any) -> None:
    async def main() -> None:
        async with VoiceAgentServer(config(), engines) as server:
            ws = await connect(server.url)
            rec, pump = await recording(ws)

            async def error_for(message: str) -> dict[str, Any]:
                mark = len(rec.events)
                await ws.send(message)
                err: dict[str, Any] = (await rec.wait_for("error", 10, start=mark))["error"]
                return err

            assert (await error_for('{"type": "response.cancel", "n": ' + "9" * 5000 + "}"))["code"] == "invalid_json"
            assert (await error_for('{"type": "conversation.item.create", "item": {"role": "user", "content": '
                                    '[{"type": "input_text", "text": "\\ud800"}]}}'))["code"] == "invalid_json"  # fmt: skip
            voice = await error_for(
                json.dumps({"type": "session.update", "event_id": "evt_v", "session": {"audio": {"output": {"voice": ""}}}})
            )
            assert (voice["code"], voice["event_id"]) == ("invalid_value", "evt_v")
            missing = await error_for(json.dumps({"type": "conversation.item.delete", "event_id": "evt_d", "item_id": "item_nope"}))
            assert (missing["code"], missing["event_id"]) == ("item_not_found", "evt_d")
            mark = len(rec.events)
            await ws.send(text_item("Count from one to fifty.", "evt_t"))
            added = await rec.wait_for("conversation.item.added", 10, start=mark)
            assert added["item"]["content"] == [{"type": "input_text", "text": "Count from one to fifty."}]
            await ws.send(json.dumps({"type": "response.create"}))
            created = await rec.wait_for("response.created", 30, start=mark)
            busy = await error_for(json.dumps({"type": "response.create", "event_id": "evt_r2"}))
            assert (busy["code"], busy["event_id"]) == ("conversation_already_has_active_response", "evt_r2")
            wrong = await error_for(json.dumps({"type": "response.cancel", "event_id": "evt_c", "response_id": "resp_other"}))
            assert (wrong["code"], wrong["event_id"]) == ("response_cancel_not_active", "evt_c")
            assert rec.of("response.done") == []  # the wrong id cancelled nothing
            await ws.send(json.dumps({"type": "response.cancel", "response_id": created["response"]["id"]}))
            done = await rec.wait_for("response.done", 30, start=mark)
            assert done["response"]["status"] == "cancelled"
            # The session still answers.
            mark = len(rec.events)
            await ws.send(text_item("What is the capital of France?"))
            await ws.send(json.dumps({"type": "response.create"}))
            done = await rec.wait_for("response.done", 60, start=mark)
            assert "paris" in rec.done(done).text.lower()
            await ws.close()
            await pump

    run(main(), 120)


CLI = [sys.executable, "-m", "voiceagent.cli"]


def test_serve_on_a_public_address_turns_auth_on_says_how_to_connect_and_drains_on_sigterm(run: Any) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*CLI, "serve", "--host", "0.0.0.0", "--port", "0", "--profile", SERVE_PROFILE, "--set", "server.drain_s=30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("auth on") or "Traceback" in line:
                break
        connect_line = lines[-1]
        assert "generated for this run" in connect_line, lines
        found = re.search(r"http://0\.0\.0\.0:(\d+)/#token=(\S+)", connect_line)
        assert found is not None, connect_line
        port, token = found.group(1), found.group(2)
        url = f"ws://127.0.0.1:{port}/v1/realtime"

        async def main() -> dict[str, Any]:
            assert await refused(url) == 401
            ws = await connect(url, additional_headers={"Authorization": f"Bearer {token}"})
            rec, pump = await recording(ws)
            await ws.send(text_item("Say one short sentence about the sea."))
            await ws.send(json.dumps({"type": "response.create"}))
            await rec.wait_for("response.created", 30)
            proc.send_signal(signal.SIGTERM)
            assert proc.stdout is not None
            while "draining:" not in (line := await asyncio.to_thread(proc.stdout.readline)):
                assert line, "the server ended without draining"
            # Draining: readiness fails and new sessions are refused; the reply goes on.
            assert (await asyncio.to_thread(http_get, f"http://127.0.0.1:{port}/readyz"))[0] == 503
            assert await refused(url, additional_headers={"Authorization": f"Bearer {token}"}) == 503
            done = await rec.wait_for("response.done", 60)
            await pump  # then the server closes the session
            return done

        done = run(main(), 120)
        assert done["response"]["status"] == "completed"
        assert proc.wait(60) == 0
        rest = proc.stdout.read()
        assert "stopped" in rest and "Traceback" not in rest, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
