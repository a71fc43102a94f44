"""An application's webhook endpoint, as one written for OpenAI's SIP APIs has: each POST checked
with the ``openai`` package's ``client.webhooks.unwrap``."""

from __future__ import annotations

import asyncio
import base64
import http.server
import queue
import threading
from collections.abc import Iterator
from typing import Any

import openai

__all__ = ["SECRET", "Application", "serving"]

SECRET = "whsec_" + base64.b64encode(b"a test secret of thirty-two byte").decode()


class Application:
    """The application's webhook endpoint: each POST is checked with the ``openai`` package's
    ``webhooks.unwrap`` (a bad signature is answered 400 and kept as such)."""

    def __init__(self) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        client = openai.OpenAI(api_key="not-needed", webhook_secret=SECRET)
        events = self.events

        class Hook(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    events.put(client.webhooks.unwrap(body, dict(self.headers)))
                    self.send_response(200)
                except openai.InvalidWebhookSignatureError as exc:
                    events.put(exc)
                    self.send_response(400)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks/openai"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    async def next_call(self, kind: str = "realtime.call.incoming", within_s: float = 20) -> Any:
        """The next ``kind`` event; the other kind's (the same calls, by default announced both
        ways: ``server.sip_webhook_events``) are passed over."""
        while True:
            event = await asyncio.to_thread(self.events.get, True, within_s)
            assert not isinstance(event, Exception), event
            assert event.type in ("realtime.call.incoming", "live.transport.incoming"), event
            if event.type == kind:
                return event

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serving() -> Iterator[Application]:
    """An :class:`Application` for a fixture's lifetime (``yield from serving()``)."""
    application = Application()
    try:
        yield application
    finally:
        application.close()
