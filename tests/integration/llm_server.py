"""A real OpenAI-compatible LLM server for tests: ``python -m llama_cpp.server`` on loopback,
serving the packaged Qwen GGUF.  Its output is captured so tests can read what it logged."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import IO

from tests.conftest import SCALE
from tests.ports import free_port
from tests.profile import LLM_THREADS, profile_config
from voiceagent.backends.llama_cpp import gguf_path


class LlamaCppServer:
    """Start with :meth:`start`, stop with :meth:`kill` (SIGKILL: a crash) or :meth:`stop`."""

    def __init__(self, model: str = "qwen2.5-0.5b") -> None:
        config = profile_config()
        self.model_path = gguf_path(model, config.cache_path, config.llm.quant)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server; closed in stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 60.0) -> LlamaCppServer:
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path), "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--n_threads", LLM_THREADS or "2", "--n_ctx", "2048", "--logits_all", "false"]
        # Only a disconnect may stop a generation (the default also stops it when another request comes).
        cmd += ["--interrupt_requests", "false", "--model_alias", "qwen"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout * SCALE
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}: {self.output()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError):
                # Not listening yet: polling a child process's readiness, with a deadline.
                time.sleep(0.1)
        raise RuntimeError(f"llama_cpp.server not ready after {timeout} s: {self.output()[-2000:]}")

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def wait_output(self, text: str, timeout: float = 10.0) -> bool:
        """Wait until the server has logged ``text`` (polling its log file, with a deadline)."""
        deadline = time.monotonic() + timeout * SCALE
        while text not in self.output():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


class SlowProxy:
    """A TCP proxy on loopback that holds back the upstream's first bytes on every connection for
    ``delay_s`` (a server that accepts a request but is slow to answer).  Runs on the test's loop.
    A client that closes its side closes the upstream connection too, as a real proxy does;
    ``client_closed`` counts those connections (an HTTP request given up by its client)."""

    def __init__(self, upstream_port: int, delay_s: float) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        self.client_closed = 0
        self.closed_event = asyncio.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> SlowProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay_s: float) -> None:
            first = True
            while data := await src.read(65536):
                if first and delay_s > 0:
                    await asyncio.sleep(delay_s)  # the slowness being simulated, not a synchronisation
                first = False
                dst.write(data)
                await dst.drain()

        pipes = [asyncio.ensure_future(pipe(client_r, up_w, 0.0)), asyncio.ensure_future(pipe(up_r, client_w, self.delay_s))]
        for p in pipes:
            self._tasks.add(p)
            p.add_done_callback(self._tasks.discard)
        # Either side closing ends the connection on both sides.
        done, _ = await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        if pipes[0] in done:
            self.client_closed += 1
            self.closed_event.set()
        for p in pipes:
            p.cancel()
        for w in (up_w, client_w):
            w.close()
