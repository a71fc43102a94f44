"""The deployment files work as written (issue #33): docker/compose.yaml, rendered the way Compose
renders it, gives every voiceagent replica the one configured token (none generates its own), the
HAProxy backend is exactly the replica services, and .dockerignore keeps local junk out of the
build context without dropping anything the Dockerfiles build from.

No Docker engine and no network: Compose renders the file (``docker-compose config``, the real
tool, with its own interpolation) and the token rules are the server's own
(:func:`voiceagent.config.load_config` and :func:`voiceagent.transports.auth.access_for`).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML: a dependency of faster-whisper's huggingface_hub (the cpu extra)

from tests.env.test_docker import compose_config
from voiceagent.config import load_config
from voiceagent.transports.auth import Access, access_for

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
HAPROXY = ROOT / "docker" / "haproxy.cfg"
DOCKERIGNORE = ROOT / ".dockerignore"
DOCKERFILES = sorted((ROOT / "docker").glob("Dockerfile*"))
TOKEN = "t0k3n-for-every-replica"
TOKEN_VAR = "VOICEAGENT_TOKEN"


# --- Compose, rendered ----------------------------------------------------------------------


def _render(env: Mapping[str, str]) -> dict[str, Any]:
    """compose.yaml as ``docker-compose config`` renders it with ``env`` (the real tool, as
    tests/env/test_docker.py uses it); a variable Compose refuses to start without fails here."""
    proc = compose_config(env, "gpu", "cpu")
    assert proc.returncode == 0, proc.stderr
    rendered = yaml.safe_load(proc.stdout)
    assert isinstance(rendered, dict) and isinstance(rendered.get("services"), dict)
    return rendered


def _environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the `- KEY=value` form
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(key): "" if value is None else str(value) for key, value in env.items()}


def _replicas(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The services built from this repository's Dockerfiles: the voiceagent replicas."""
    replicas = {}
    for name, service in config["services"].items():
        build = service.get("build")
        if build is None:
            assert not str(service.get("image", "")).startswith("voiceagent"), f"{name} runs a voiceagent image it does not build"
            continue
        dockerfile = build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile"
        context = build.get("context", ".") if isinstance(build, dict) else build
        path = (COMPOSE.parent / context / dockerfile).resolve()
        assert path in DOCKERFILES, f"{name} builds from {path}, not one of {DOCKERFILES}"
        replicas[name] = {**service, "_dockerfile": path}
    assert replicas, "compose.yaml runs no voiceagent replica"
    return replicas


def _dockerfile_cmd(path: Path) -> list[str]:
    cmds = [line[len("CMD") :].strip() for line in path.read_text().splitlines() if line.startswith("CMD ")]
    assert cmds, f"{path.name} has no CMD"
    cmd = json.loads(cmds[-1])  # the exec form; the last CMD is the one that runs
    assert isinstance(cmd, list)
    return [str(part) for part in cmd]


def _command(replica: Mapping[str, Any]) -> list[str]:
    command = replica.get("command")
    if command is None:
        return _dockerfile_cmd(replica["_dockerfile"])
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def _flag(command: list[str], name: str) -> str | None:
    for i, part in enumerate(command):
        if part == name and i + 1 < len(command):
            return command[i + 1]
        if part.startswith(name + "="):
            return part.split("=", 1)[1]
    return None


def _access(replica: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Access:
    """Who the replica lets in, by the server's own rules, from its environment and command line."""
    command = _command(replica)
    overrides = {"server.host": host} if (host := _flag(command, "--host")) else {}
    config = load_config(env=_environment(replica) if env is None else env, overrides=overrides)
    return access_for(config.server)


def _port(replica: Mapping[str, Any]) -> int:
    return int(_flag(_command(replica), "--port") or load_config(env={}).server.port)


def test_rendering_needs_the_token_and_passes_it_through() -> None:
    for env in ({}, {TOKEN_VAR: ""}):  # Compose refuses to start, naming the variable
        proc = compose_config(env, "gpu", "cpu")
        assert proc.returncode != 0 and TOKEN_VAR in proc.stderr, proc.stderr
    for token in (TOKEN, "another-token"):  # the value comes from the variable, not the file
        for replica in _replicas(_render({TOKEN_VAR: token})).values():
            assert token in _environment(replica).values()


@pytest.mark.parametrize("llm_service", ["vllm", "llama-server"])
def test_every_replica_accepts_the_one_configured_token_and_generates_none(llm_service: str) -> None:
    replicas = _replicas(_render({TOKEN_VAR: TOKEN, "LLM_SERVICE": llm_service}))
    seen = set()
    for name, replica in replicas.items():
        host = _flag(_command(replica), "--host")
        assert host == "0.0.0.0", f"{name} must listen for the proxy on every address, not {host}"
        access = _access(replica)
        assert not access.generated, f"{name} would generate its own token: a client's token works on one replica in N"
        assert access.required and access.tokens == (TOKEN,), (name, access.tokens)
        seen.add(access.tokens)
    assert seen == {(TOKEN,)}


def test_a_replica_bound_to_every_address_without_the_token_would_generate_its_own() -> None:
    """The check above can fail: the same replica, its token taken away, is the bug being guarded."""
    for replica in _replicas(_render({TOKEN_VAR: TOKEN})).values():
        env = {k: v for k, v in _environment(replica).items() if k != "VOICEAGENT_SERVER__AUTH_TOKENS"}
        assert _access(replica, env).generated


# --- HAProxy ----------------------------------------------------------------------------------


def _haproxy_sections() -> dict[tuple[str, str], list[list[str]]]:
    sections: dict[tuple[str, str], list[list[str]]] = {}
    current: list[list[str]] | None = None
    for raw in HAPROXY.read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        words = line.split()
        if not raw[0].isspace():
            current = sections.setdefault((words[0], words[1] if len(words) > 1 else ""), [])
        elif current is not None:
            current.append(words)
    return sections


def test_the_proxy_backends_are_exactly_the_replica_services() -> None:
    config = _render({TOKEN_VAR: TOKEN})
    replicas = _replicas(config)
    sections = _haproxy_sections()
    used = {
        words[1]
        for (kind, _), lines in sections.items()
        if kind == "frontend"
        for words in lines
        if words[0] in ("default_backend", "use_backend")
    }
    assert used, "no frontend sends traffic to a backend"
    targets: set[tuple[str, int]] = set()
    for backend in used:
        assert ("backend", backend) in sections, f"frontend uses backend {backend}, which haproxy.cfg does not define"
        for words in sections[("backend", backend)]:
            if words[0] == "server":  # server <name> <host>:<port> ...
                address = words[2]
            elif words[0] == "server-template":  # server-template <prefix> <count> <host>:<port> ...
                assert int(words[2].split("-")[-1]) >= 1
                address = words[3]
            else:
                continue
            host, _, port = address.rpartition(":")
            targets.add((host, int(port)))
    expected = {(name, _port(replica)) for name, replica in replicas.items()}
    assert targets == expected, f"haproxy.cfg balances over {sorted(targets)}, the replicas are {sorted(expected)}"
    proxies = [s for s in config["services"].values() if any("haproxy.cfg:" in str(v) for v in s.get("volumes", []))]
    assert len(proxies) == 1, "exactly one service mounts docker/haproxy.cfg"
    depends = proxies[0].get("depends_on", [])
    assert set(replicas) <= set(depends if isinstance(depends, list) else depends.keys())


# --- .dockerignore ----------------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``), anchored at the context root."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
            continue
        if pattern.startswith("**", i):
            out, i = out + ".*", i + 2
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end]
            out += "[" + ("^" + body[1:] if body[:1] in ("!", "^") else body) + "]"
            i = end + 1
            continue
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out)


def _dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        pattern = line[1:].strip() if keep else line
        pattern = re.sub(r"/+", "/", pattern).strip("/").removeprefix("./")
        rules.append((keep, _pattern_regex(pattern)))
    return rules


def _excluded(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent folders decides."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for keep, regex in rules:
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not keep
    return excluded


RULES = _dockerignore_rules(DOCKERIGNORE.read_text())


def test_the_matcher_follows_docker_semantics() -> None:
    rules = _dockerignore_rules("__pycache__\n**/.venv\nbuild\n!build/keep.txt\n*.log\n")
    assert _excluded("__pycache__/a.pyc", rules)
    assert not _excluded("pkg/__pycache__/a.pyc", rules)  # anchored at the root: **/ reaches deeper
    assert _excluded("pkg/.venv/bin/python", rules)
    assert _excluded("build/out.o", rules) and not _excluded("build/keep.txt", rules)
    assert _excluded("x.log", rules) and not _excluded("logs/x.log", rules)


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".venv-vllm/bin/python",
        ".git/HEAD",
        "voiceagent/__pycache__/config.cpython-311.pyc",
        "voiceagent/transports/__pycache__/auth.cpython-311.pyc",
        "tests/unit/__pycache__/test_config.cpython-311-pytest-8.0.pyc",
        ".mypy_cache/3.11/voiceagent/config.data.json",
        ".ruff_cache/0.5.0/123",
        ".pytest_cache/v/cache/nodeids",
        ".hypothesis/examples/abc",
        ".cache/fixtures/hello.wav",
        "artifacts/soak8.log",
        "dist/voiceagent-0.1.0.whl",
        "voiceagent.egg-info/PKG-INFO",
    ],
)
def test_dockerignore_keeps_local_junk_out_of_the_context(path: str) -> None:
    assert _excluded(path, RULES), f"{path} would be sent to the Docker build"


def _copy_sources(dockerfile: Path) -> list[str]:
    sources = []
    for line in dockerfile.read_text().replace("\\\n", " ").splitlines():
        words = line.split()
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]):
            continue  # from another stage or image, not the context
        if args and args[0].startswith("["):
            args = json.loads(" ".join(args))
        sources += args[:-1]
    return sources


def _scripts_run(text: str, seen: set[str]) -> set[str]:
    """scripts/*.sh the build runs, and the ones those run in turn."""
    for script in re.findall(r"\b(scripts/[\w.-]+\.sh)\b", text):
        if script not in seen:
            seen.add(script)
            _scripts_run((ROOT / script).read_text(), seen)
    return seen


def _files_the_install_reads(dockerfile: Path) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {"pyproject.toml", str(project["project"]["readme"])}
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed |= set(wheel.get("force-include", {}))
    for package in wheel["packages"]:
        needed |= {p.relative_to(ROOT).as_posix() for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts}
    needed |= _scripts_run(dockerfile.read_text(), set())
    return needed


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_dockerfiles_copy_nothing_dockerignore_excludes(dockerfile: Path) -> None:
    sources = _copy_sources(dockerfile)
    assert sources, f"{dockerfile.name} copies nothing from the context"
    for source in sources:
        if source in (".", "./"):  # the whole context: what the install reads must be in it
            needed = _files_the_install_reads(dockerfile)
            assert {"pyproject.toml", "README.md", "models/catalog.toml", "voiceagent/__init__.py", "scripts/setup.sh"} <= needed
            for path in sorted(needed):
                assert (ROOT / path).exists(), f"{dockerfile.name} needs {path}, which is missing"
                assert not _excluded(path, RULES), f"{dockerfile.name} needs {path}, which .dockerignore excludes"
        else:
            assert not _excluded(source.removeprefix("./"), RULES), f"{dockerfile.name} copies {source}, which .dockerignore excludes"


def test_the_proxy_weighs_each_replica_by_the_load_its_agent_reports() -> None:
    """Every server line of the used backend asks the replica's agent (server.agent_port, as the
    rendered replicas configure it) for its weight, and the replicas serve that agent."""
    replicas = _replicas(_render({TOKEN_VAR: TOKEN}))
    ports = {load_config(env=_environment(r)).server.agent_port for r in replicas.values()}
    assert len(ports) == 1 and 0 not in ports, f"every replica must serve the agent on one port, not {ports}"
    (agent_port,) = ports
    servers = [words for words in _haproxy_sections()[("backend", "voiceagent")] if words[0] in ("server", "server-template")]
    assert servers
    for words in servers:
        assert "agent-check" in words, words
        assert words[words.index("agent-port") + 1] == str(agent_port), words
        assert "agent-inter" in words, words
        # The agent's "NN%" scales the configured weight in integers: at the default weight of 1
        # any answer under 100% is weight 0, and the replica takes no new session.
        assert "weight" in words and int(words[words.index("weight") + 1]) >= 100, words
        assert words[words.index("check") - 1].endswith(":8765"), "the health check stays on the WebSocket port (liveness)"
