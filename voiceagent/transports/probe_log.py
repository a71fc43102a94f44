"""The server's connection log, without a line for every health check.

``websockets`` logs each plain HTTP exchange at INFO: "HTTP response sent (200 OK)" and then
"connection closed". A load balancer checking ``/readyz`` every second or two, or a scraper
reading ``/metrics``, fills the log with them and costs the event loop a formatted write each
time (about 8 % of its CPU with ``benchmarks.concurrency``'s poller at 2 Hz). Successful plain HTTP
exchanges are therefore logged only at DEBUG; refusals (4xx, 5xx: a 503 while full, a 401) and
every WebSocket connection's lines stay at INFO.
"""

from __future__ import annotations

import logging

WIRE_LOGGER = "voiceagent.transports.wire"
"""The logger the server hands ``websockets`` for its connections (set ``DEBUG`` to see every probe)."""


class QuietProbes(logging.Filter):
    """Drops the INFO lines of a successful plain HTTP exchange unless the logger is at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or logging.getLogger(WIRE_LOGGER).isEnabledFor(logging.DEBUG):
            return True
        if record.msg == "HTTP response sent (%d %s)":
            status = record.args[0] if isinstance(record.args, tuple) and record.args else None
            return not (isinstance(status, int) and status < 400)
        if record.msg == "connection closed":
            # The connection the line is about: websockets puts it in the record (a weak proxy).
            try:
                response = getattr(getattr(record, "websocket", None), "response", None)
            except ReferenceError:  # the connection is already gone: keep the line
                return True
            status = getattr(response, "status_code", None)
            return not (isinstance(status, int) and status != 101 and status < 400)
        return True


def wire_logger() -> logging.Logger:
    """The logger for ``websockets.serve(logger=...)``, with :class:`QuietProbes` attached once."""
    logger = logging.getLogger(WIRE_LOGGER)
    if not any(isinstance(f, QuietProbes) for f in logger.filters):
        logger.addFilter(QuietProbes())
    return logger
