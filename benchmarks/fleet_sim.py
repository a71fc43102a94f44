"""A day of callers on a voiceagent fleet, simulated (seeded): how many replicas, LLM GPUs and
proxies a peak of N concurrent calls needs, how many callers the autoscaler's lag refuses, and
which part runs out first.

The model and every input's source are in docs/scale.md.  Each minute of a 24-hour day:
callers arrive as a Poisson process whose rate follows a business-hours curve scaled so that the
busiest minute holds ``--peak`` calls (Little's law with the mean call length); each call lasts
a log-normal time and talks at the natural pace (one turn per ``PACE_S``).  Replicas admit up to
their measured capacity; an autoscaler on their load asks for more every 15 s and gets each new
replica after ``--pod-start-s``, and gives them back slowly (the HPA's behaviour in
deploy/kubernetes/voiceagent.yaml).  A caller who finds every ready replica full is refused.

    python -m benchmarks.fleet_sim                       # 10, 1,000 and 100,000 at the peak
    python -m benchmarks.fleet_sim --peak 5000 --json out.json

Pure arithmetic on the CPU: a day at 100,000 calls takes about a second.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

PACE_S = 20.0
"""One turn per caller per this many seconds (voiceagent.admission.PACE_S)."""


@dataclass(frozen=True)
class Inputs:
    """What the simulation assumes; docs/scale.md gives each one's source."""

    calls_per_replica: float = 18.0
    """Calls one 2-core replica admits with the LLM on a remote tier (load threshold 0.75 over
    about 1.65 CPU-s a turn outside the LLM)."""
    hpa_target: float = 0.6
    """The autoscaler's target load (deploy/kubernetes/voiceagent.yaml); replicas refuse at 0.75."""
    refuse_load: float = 0.75
    pod_start_s: float = 90.0
    """From the autoscaler's decision to a ready replica: scheduling, image, loading and warm-up."""
    mean_call_s: float = 180.0
    call_sigma: float = 0.8
    prompt_tokens_per_turn: float = 150.0
    """New prompt tokens a turn evaluates (the prefix cache holds the instructions and history)."""
    output_tokens_per_turn: float = 60.0
    gpu_tokens_per_s: float = 11500.0
    """One H100 serving a 9B model with vLLM, prompt and output tokens together (published)."""
    gpu_utilisation: float = 0.5
    """The share of that kept in use, so that time per output token stays voice-fast."""
    proxy_maxconn: int = 4096
    """docker/haproxy.cfg's ``maxconn``: the connections one proxy holds."""


def day_shape(minutes: np.ndarray) -> np.ndarray:
    """Concurrent calls over a business day, 1.0 at its busiest minute: a morning and an
    afternoon peak over a night floor."""
    h = minutes / 60.0
    shape = 0.06 + np.exp(-(((h - 10.5) / 2.2) ** 2)) + 0.85 * np.exp(-(((h - 15.0) / 2.0) ** 2))
    return np.asarray(shape / shape.max())


def simulate(peak: int, inputs: Inputs, seed: int) -> dict[str, float | int | str]:
    """One seeded day at ``peak`` concurrent calls; the figures docs/scale.md tabulates."""
    rng = np.random.default_rng(seed)
    minutes = np.arange(24 * 60)
    # Little's law: calls in progress = arrival rate × mean length.
    rate_per_min = peak * day_shape(minutes) / (inputs.mean_call_s / 60.0)
    arrivals = rng.poisson(rate_per_min)
    mu = math.log(inputs.mean_call_s) - inputs.call_sigma**2 / 2  # a log-normal with that mean
    per_replica = inputs.calls_per_replica
    target = per_replica * inputs.hpa_target / inputs.refuse_load  # calls a replica holds at the HPA's target
    ends: list[np.ndarray] = []  # each minute's admitted calls' end times (s)
    active_at: list[int] = []
    ready = max(2, math.ceil(rate_per_min[0] * inputs.mean_call_s / 60.0 / target))
    pending: list[float] = []  # ready times (s) of replicas asked for
    last_down = -1e9
    offered = refused = 0
    peak_replicas = ready
    for m in minutes:
        now = m * 60.0
        pending_now = [t for t in pending if t <= now]
        ready += len(pending_now)
        pending = [t for t in pending if t > now]
        alive = [e[e > now] for e in ends]
        ends = [e for e in alive if e.size]
        active = int(sum(e.size for e in ends))
        n = int(arrivals[m])
        offered += n
        room = max(0, int(ready * per_replica) - active)
        admitted = min(n, room)
        refused += n - admitted
        if admitted:
            ends.append(now + rng.uniform(0, 60, admitted) + rng.lognormal(mu, inputs.call_sigma, admitted))
        # Calls in progress at the minute's end (those that arrived and ended within it do not count).
        active_at.append(int(sum(int((e > now + 60).sum()) for e in ends)))
        # The autoscaler: as many replicas as hold the minute's most calls at its target.  A full
        # fleet reports the refusing load (0.75) however many it refuses, so it grows by 0.75 / 0.6
        # per pod start, as a real HPA on this metric does.
        want = max(2, math.ceil((active + admitted) / target))
        have = ready + len(pending)
        if want > have:
            pending += [now + inputs.pod_start_s] * (want - have)
        elif want < ready and now - last_down >= 120:  # scale in: one pod every two minutes
            ready -= 1
            last_down = now
        peak_replicas = max(peak_replicas, ready)
    top = max(active_at)
    tokens_per_s = top * (inputs.prompt_tokens_per_turn + inputs.output_tokens_per_turn) / PACE_S
    gpus = math.ceil(tokens_per_s / (inputs.gpu_tokens_per_s * inputs.gpu_utilisation))
    proxies = math.ceil(top / inputs.proxy_maxconn)
    first = "one HAProxy's maxconn" if top > inputs.proxy_maxconn else ("replicas (autoscaler lag)" if refused else "nothing")
    return {
        "peak_target": peak,
        "peak_concurrent": top,
        "calls_offered": offered,
        "calls_refused": refused,
        "refused_pct": round(100.0 * refused / max(1, offered), 3),
        "replicas_peak": peak_replicas,
        "llm_tokens_per_s_peak": round(tokens_per_s),
        "llm_gpus": gpus,
        "proxies": proxies,
        "fails_first": first,
        "proxy_load_one": round(top / inputs.proxy_maxconn, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peak", type=int, action="append", help="concurrent calls at the busiest minute (repeatable)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--pod-start-s", type=float, default=Inputs.pod_start_s)
    ap.add_argument("--json", type=Path, help="write the inputs and results here")
    args = ap.parse_args(argv)
    inputs = Inputs(pod_start_s=args.pod_start_s)
    rows = [simulate(peak, inputs, args.seed) for peak in args.peak or [10, 1000, 100000]]
    head = ["peak_target", "peak_concurrent", "refused_pct", "replicas_peak", "llm_gpus", "proxies", "fails_first"]
    print(" | ".join(head))
    for row in rows:
        print(" | ".join(str(row[k]) for k in head))
    if args.json:
        args.json.write_text(json.dumps({"inputs": asdict(inputs), "seed": args.seed, "results": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
