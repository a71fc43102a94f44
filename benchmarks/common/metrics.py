"""A server's Prometheus ``/metrics``, read into a flat dictionary (soak.py, cache.py)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["read", "scrape"]


def scrape(url: str) -> dict[str, float]:
    """The ``/metrics`` of the server whose WebSocket URL is ``url`` (``ws://HOST:PORT/v1/...``):
    :func:`read` of its HTTP base."""
    return read(url.split("/v1/")[0].replace("ws://", "http://"))


def read(base: str) -> dict[str, float]:
    """``GET {base}/metrics`` (``base``: ``http://HOST:PORT``), parsed by prometheus-client's own
    parser, as ``{'name{a="x",b="y"}': value}`` (labels sorted by name; a sample without labels:
    its bare name).  Blocking; raises :class:`OSError` when the server does not answer within 10 s."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out
