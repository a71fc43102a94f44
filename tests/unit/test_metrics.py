"""voiceagent.observability.metrics: the registry of one server, read back through prometheus-client's parser."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from voiceagent.observability.metrics import REFUSALS, Metrics


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }


def test_each_server_has_its_own_registry_and_every_update_shows_in_the_exposition() -> None:
    a, b = Metrics(), Metrics()
    a.session_opened()
    a.session_opened()
    a.session_closed()
    a.refused("unauthorized")
    a.refused("capacity")
    a.refused("capacity")
    a.error("llm_failed")
    a.observe_turn("completed", {"first_audio_sent": 420.0, "llm_first_token": 200.0, "not_a_mark": 1.0}, llm_queue_ms=5.0)
    a.observe_turn("cancelled", {})
    a.observe_llm_route(("llama_cpp", "primary"))
    a.observe_tokens("llama_cpp", prompt=50, reused=40, generated=21, decode_s=1.0)
    a.queue_wait("tts", 0.02)
    got = samples(a)
    assert got[("voiceagent_sessions_active", ())] == 1
    assert got[("voiceagent_sessions_total", ())] == 2
    assert got[("voiceagent_sessions_refused_total", (("reason", "capacity"),))] == 2
    assert got[("voiceagent_sessions_refused_total", (("reason", "draining"),))] == 0  # every reason shown from the start
    assert a.sessions_refused == 3 and a.errors == 1 and a.sessions_active == 1 and a.sessions_total == 2
    assert got[("voiceagent_turns_total", (("status", "completed"),))] == 1
    assert got[("voiceagent_turns_total", (("status", "cancelled"),))] == 1
    assert got[("voiceagent_span_seconds_sum", (("mark", "first_audio_sent"),))] == 0.42
    assert got[("voiceagent_span_seconds_bucket", (("le", "0.5"), ("mark", "first_audio_sent")))] == 1
    assert got[("voiceagent_span_seconds_bucket", (("le", "0.4"), ("mark", "first_audio_sent")))] == 0
    assert not any(name.startswith("voiceagent_span") and ("mark", "not_a_mark") in labels for name, labels in got)
    assert got[("voiceagent_llm_queue_seconds_count", ())] == 1
    assert got[("voiceagent_llm_answers_total", (("engine", "llama_cpp"), ("reason", "primary")))] == 1
    assert got[("voiceagent_llm_turn_tokens_total", (("engine", "llama_cpp"), ("kind", "reused")))] == 40
    assert got[("voiceagent_llm_tokens_per_second_sum", (("engine", "llama_cpp"),))] == 20.0  # 20 tokens after the first in 1 s
    assert got[("voiceagent_queue_wait_seconds_count", (("queue", "tts"),))] == 1
    assert set(REFUSALS) == {"unauthorized", "forbidden", "capacity", "load", "draining"}
    assert samples(b)[("voiceagent_sessions_total", ())] == 0  # nothing leaks between registries


def test_collectors_are_read_at_each_scrape() -> None:
    m = Metrics()
    depth = [3]

    def collect() -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily("voiceagent_queue_depth", "depth", value=depth[0])]

    m.add_collector(collect)
    assert samples(m)[("voiceagent_queue_depth", ())] == 3
    depth[0] = 7
    assert samples(m)[("voiceagent_queue_depth", ())] == 7


def test_names_restrict_the_exposition_to_those_samples() -> None:
    metrics = Metrics()
    metrics.session_opened()
    metrics.add_collector(lambda: [GaugeMetricFamily("voiceagent_load", "load", value=0.5)])
    whole = metrics.render().decode()
    assert "voiceagent_load 0.5" in whole and "voiceagent_sessions_active 1.0" in whole
    some = metrics.render(["voiceagent_load"]).decode()
    families = [f.name for f in text_string_to_metric_families(some)]
    assert families == ["voiceagent_load"], some
    assert "voiceagent_load 0.5" in some
