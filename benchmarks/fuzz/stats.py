"""What the hostile clients sent and what came back: the counts the report and its invariants read."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

ERROR_CAP = 2048
"""The most bytes an ``error`` event may have, whatever message caused it (errors are bounded)."""


@dataclass
class Stats:
    sent: Counter[str] = field(default_factory=Counter)  # hostile messages by category
    valid_frames: Counter[str] = field(default_factory=Counter)  # well-formed frames hostile clients sent around them
    scenarios: Counter[str] = field(default_factory=Counter)
    fragmented: int = 0
    close_codes: Counter[str] = field(default_factory=Counter)
    close_1011: list[str] = field(default_factory=list)
    unexpected_closes: Counter[str] = field(default_factory=Counter)
    unexpected_close_samples: list[str] = field(default_factory=list)
    rt_bad: int = 0
    rt_bad_answered: int = 0
    rt_unverifiable: int = 0  # bad messages followed by the client vanishing before it could read the answer
    rt_missing: int = 0
    rt_missing_samples: list[str] = field(default_factory=list)
    rt_errors: int = 0
    rt_error_codes: Counter[str] = field(default_factory=Counter)
    rt_valid_errored: Counter[str] = field(default_factory=Counter)
    rt_rate_errors: int = 0
    burst_without_rate_error: int = 0
    tw_bad: int = 0
    tw_refused: int = 0
    tw_not_refused: int = 0
    tw_not_refused_samples: list[str] = field(default_factory=list)
    http_answers: Counter[str] = field(default_factory=Counter)
    refused_handshakes: Counter[str] = field(default_factory=Counter)
    client_exceptions: Counter[str] = field(default_factory=Counter)
    client_exception_samples: list[str] = field(default_factory=list)
    rt_error_max_bytes: int = 0  # the largest error event received, as sent
    rt_error_oversized: list[str] = field(default_factory=list)  # error events over ERROR_CAP bytes (their code and size)

    def error_size(self, raw: str | bytes, msg: dict[str, Any]) -> None:
        """Note the size of an ``error`` event: none may exceed :data:`ERROR_CAP`, whatever caused it."""
        size = len(raw.encode() if isinstance(raw, str) else raw)
        self.rt_error_max_bytes = max(self.rt_error_max_bytes, size)
        if size > ERROR_CAP and len(self.rt_error_oversized) < 20:
            self.rt_error_oversized.append(f"{(msg.get('error') or {}).get('code')}: {size} bytes")

    def close(self, route: str, code: int | None, expected: set[int] | None, what: str) -> None:
        shown = "none" if code is None else str(code)
        self.close_codes[f"{route}:{shown}"] += 1
        if code == 1011:
            self.close_1011.append(f"{route} {what}")
        if expected is not None and code not in expected:
            self.unexpected_closes[f"{route}:{what}:{shown}"] += 1
            if len(self.unexpected_close_samples) < 20:
                self.unexpected_close_samples.append(f"{route} {what}: got {shown}, expected {sorted(expected)}")

    def exception(self, where: str, exc: BaseException) -> None:
        key = f"{where}:{type(exc).__name__}"
        self.client_exceptions[key] += 1
        if len(self.client_exception_samples) < 20:
            self.client_exception_samples.append(f"{key}: {str(exc)[:200]}")
