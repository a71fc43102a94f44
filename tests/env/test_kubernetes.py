"""deploy/kubernetes is valid Kubernetes and says what docker/compose.yaml says (issue #71, item 2).

Offline: every document is validated strictly against the Kubernetes API schemas that
``kubernetes-validate`` ships, and the manifests are compared with docker/compose.yaml as Compose
itself renders it (``docker-compose config``), the Dockerfile's command, port and health check,
and docker/haproxy.cfg's agent port.  :func:`drift` names each disagreement; a test shows that it
catches one."""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml  # PyYAML: a dependency of faster-whisper's huggingface_hub (the cpu extra)

from tests.env.test_docker import compose_config

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
DOCKERFILE = ROOT / "docker" / "Dockerfile.cpu"
HAPROXY = ROOT / "docker" / "haproxy.cfg"
SERVER = ROOT / "voiceagent" / "transports" / "server.py"
KUBE_VERSION = "1.37.0"
TOKEN = "t0k3n"


def documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(KUBE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    """Every manifest by (kind, name)."""
    return {(doc["kind"], doc["metadata"]["name"]): doc for _, doc in documents()}


def compose() -> dict[str, Any]:
    proc = compose_config({"VOICEAGENT_TOKEN": TOKEN}, "gpu")
    assert proc.returncode == 0, proc.stderr
    rendered: dict[str, Any] = yaml.safe_load(proc.stdout)
    return rendered


def _container(kube: dict[tuple[str, str], dict[str, Any]], name: str) -> dict[str, Any]:
    [container] = kube[("Deployment", name)]["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _dockerfile_cmd() -> list[str]:
    line = next(row for row in DOCKERFILE.read_text().splitlines() if row.startswith("CMD "))
    return list(yaml.safe_load(line.removeprefix("CMD ")))


def drift(kube: dict[tuple[str, str], dict[str, Any]], rendered: dict[str, Any]) -> list[str]:
    """Where the Kubernetes manifests and the compose deployment disagree ([] when they agree)."""
    found: list[str] = []
    server, replica = _container(kube, "voiceagent"), rendered["services"]["voiceagent"]
    # Environment: the same settings with the same values; the token comes from a Secret.
    want = {k: str(v) for k, v in replica["environment"].items()}
    have: dict[str, str] = {}
    for item in server.get("env", []):
        if "valueFrom" in item:
            ref = item["valueFrom"].get("secretKeyRef", {})
            secret = kube.get(("Secret", ref.get("name", "")), {})
            have[item["name"]] = TOKEN if ref.get("key") in secret.get("stringData", {}) else "<missing secret>"
        else:
            have[item["name"]] = str(item.get("value"))
    for key in sorted(want.keys() | have.keys()):
        if want.get(key) != have.get(key):
            found.append(f"env {key}: compose {want.get(key)!r}, kubernetes {have.get(key)!r}")
    # Ports: the Dockerfile's serving port, the agent port HAProxy reads, and the Service.
    ports = {p["name"]: p["containerPort"] for p in server.get("ports", [])}
    cmd = _dockerfile_cmd()
    serve_port = int(cmd[cmd.index("--port") + 1])
    if ports.get("ws") != serve_port:
        found.append(f"port ws: the Dockerfile serves on {serve_port}, the container says {ports.get('ws')}")
    agent = re.search(r"agent-port (\d+)", HAPROXY.read_text())
    agent_port = int(agent.group(1)) if agent else None
    if ports.get("agent") != agent_port or have.get("VOICEAGENT_SERVER__AGENT_PORT") != str(agent_port):
        found.append(
            f"port agent: haproxy.cfg {agent_port}, container {ports.get('agent')}, env {have.get('VOICEAGENT_SERVER__AGENT_PORT')}"
        )
    service_ports = {p["name"]: p for p in kube[("Service", "voiceagent")]["spec"]["ports"]}
    published = [int(str(p).split(":")[0]) for p in (rendered["services"]["proxy"].get("ports") or []) for p in [p.get("published", p)]]
    if service_ports.get("ws", {}).get("port") not in published:
        found.append(f"service port: compose publishes {published}, the Service {service_ports.get('ws', {}).get('port')}")
    if server.get("args") != cmd:
        found.append(f"command: the Dockerfile runs {cmd}, the container {server.get('args')}")
    # Probes: the Dockerfile's health check is liveness; readiness is the admission's /readyz.
    health = re.search(r"http://127\.0\.0\.1:(\d+)(/\w+)", DOCKERFILE.read_text())
    assert health is not None
    if server.get("livenessProbe", {}).get("httpGet", {}).get("path") != health.group(2):
        found.append(f"liveness: the Dockerfile checks {health.group(2)}, the probe {server.get('livenessProbe')}")
    routes = set(re.findall(r'path == "(/\w+)"', SERVER.read_text()))
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        path = server.get(probe, {}).get("httpGet", {}).get("path")
        if path not in routes:
            found.append(f"{probe}: {path} is not a route of the server ({sorted(routes)})")
    # Drain: the grace period covers the preStop pause, the server's drain and the exit.
    pre = server.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    pause = float(pre[-1]) if pre[:1] == ["sleep"] else 0.0
    grace = kube[("Deployment", "voiceagent")]["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    drain = float(have.get("VOICEAGENT_SERVER__DRAIN_S", "10"))
    if grace < pause + drain + 5:
        found.append(f"terminationGracePeriodSeconds {grace} < preStop {pause} + drain {drain} + 5")
    stop = rendered["services"]["voiceagent"].get("stop_grace_period", "10s")
    if _seconds(stop) < drain + 5:
        found.append(f"compose stop_grace_period {stop} < drain {drain} + 5")
    # The LLM tier: the same engine, arguments and port as compose's vllm service.
    vllm, compose_vllm = _container(kube, "vllm"), rendered["services"]["vllm"]
    if vllm.get("image") != compose_vllm.get("image"):
        found.append(f"vllm image: compose {compose_vllm.get('image')}, kubernetes {vllm.get('image')}")
    command = compose_vllm.get("command")
    command = shlex.split(command) if isinstance(command, str) else command
    if vllm.get("args") != command:
        found.append(f"vllm args: compose {command}, kubernetes {vllm.get('args')}")
    if not vllm.get("resources", {}).get("limits", {}).get("nvidia.com/gpu"):
        found.append("vllm asks for no GPU")
    base = have.get("VOICEAGENT_LLM__BASE_URL", "")
    vllm_port = {p["name"]: p["port"] for p in kube[("Service", "vllm")]["spec"]["ports"]}.get("http")
    if base != f"http://vllm:{vllm_port}/v1":
        found.append(f"the replicas' LLM URL {base!r} is not the vllm Service (port {vllm_port})")
    # The autoscaler scales on a metric the server exports.
    [metric] = kube[("HorizontalPodAutoscaler", "voiceagent")]["spec"]["metrics"]
    name = metric["pods"]["metric"]["name"]
    if f'"{name}"' not in SERVER.read_text():
        found.append(f"the HPA's metric {name} is not one the server exports")
    return found


def _seconds(value: Any) -> float:
    """A compose duration (``50s``, ``1m30s``, or seconds as a number) in seconds."""
    if isinstance(value, int | float):
        return float(value)
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)(ms|s|m|h)", str(value)):
        total += float(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total


@pytest.mark.parametrize("name,doc", list(documents()), ids=lambda v: v if isinstance(v, str) else f"{v['kind']}/{v['metadata']['name']}")
def test_every_manifest_is_valid_kubernetes(name: str, doc: dict[str, Any]) -> None:
    # strict: a misspelt or misplaced field is an error, not ignored as a cluster would
    kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_the_manifests_hold_every_part_a_fleet_needs() -> None:
    kinds = {kind for kind, _ in manifests()}
    assert kinds >= {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "Ingress", "Secret"}


def test_the_manifests_agree_with_the_compose_deployment() -> None:
    assert drift(manifests(), compose()) == []


@pytest.mark.parametrize(
    "change",
    ["port", "env", "probe", "grace", "vllm"],
)
def test_a_drift_is_caught(change: str) -> None:
    kube, rendered = manifests(), compose()
    kube = copy.deepcopy(kube)
    server = kube[("Deployment", "voiceagent")]["spec"]["template"]["spec"]["containers"][0]
    if change == "port":
        server["ports"][0]["containerPort"] = 9000
    elif change == "env":
        next(e for e in server["env"] if e["name"] == "VOICEAGENT_LLM__MODEL")["value"] = "other"
    elif change == "probe":
        server["readinessProbe"]["httpGet"]["path"] = "/ready"
    elif change == "grace":
        kube[("Deployment", "voiceagent")]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 20
    else:
        kube[("Deployment", "vllm")]["spec"]["template"]["spec"]["containers"][0]["args"].remove("--enable-prefix-caching")
    assert drift(kube, rendered), change
