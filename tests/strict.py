"""Strict clients: every server event checked against the ``openai`` package's Realtime types.

Some clients (the OpenAI Agents SDK among them) validate each server event against the pydantic
models under ``openai.types.realtime`` and drop one that does not fit.  :func:`check_server_event`
does what they do, for one event, by its ``type``; the model of each type is read from the
package's ``RealtimeServerEvent`` union, so a type the package adds is checked too.
"""

from __future__ import annotations

import typing
from functools import cache
from typing import Any

import pydantic
from openai.types.live.client_event import ClientEvent as LiveClientEvent
from openai.types.live.connect_client_event import ConnectClientEvent as LiveSidebandEvent
from openai.types.live.server_event import ServerEvent as LiveServerEvent
from openai.types.realtime.realtime_client_event import RealtimeClientEvent
from openai.types.realtime.realtime_server_event import RealtimeServerEvent

__all__ = [
    "EXTENSIONS",
    "check_live_server_event",
    "check_server_event",
    "client_event_types",
    "live_client_event_types",
    "live_server_event_types",
    "server_event_types",
]

EXTENSIONS = frozenset({"voiceagent.turn_metrics"})
"""Server events of this project's own (sent only on opt-in: ``?voiceagent_metrics=1``)."""


def _models(alias: Any) -> dict[str, type[pydantic.BaseModel]]:
    """``type`` literal → model, for each member of a discriminated union of the package."""
    union = typing.get_args(alias)[0]  # Annotated[Union[...], PropertyInfo(discriminator="type")]
    out: dict[str, type[pydantic.BaseModel]] = {}
    for model in typing.get_args(union):
        (name,) = typing.get_args(model.model_fields["type"].annotation)
        out[name] = model
    return out


@cache
def server_models() -> dict[str, type[pydantic.BaseModel]]:
    return _models(RealtimeServerEvent)


def server_event_types() -> frozenset[str]:
    """Every GA server event type the installed ``openai`` package declares."""
    return frozenset(server_models())


def client_event_types() -> frozenset[str]:
    """Every GA client event type the installed ``openai`` package declares."""
    return frozenset(_models(RealtimeClientEvent))


@cache
def live_server_models() -> dict[str, type[pydantic.BaseModel]]:
    return _models(LiveServerEvent)


def live_server_event_types() -> frozenset[str]:
    """Every GPT-Live server event type the installed ``openai`` package declares."""
    return frozenset(live_server_models())


def live_client_event_types() -> frozenset[str]:
    """Every GPT-Live client event type the installed ``openai`` package declares: a primary's
    and a sideband's (``transport.dtmf.send`` is a sideband's alone)."""
    return frozenset(_models(LiveClientEvent)) | frozenset(_models(LiveSidebandEvent))


def check_live_server_event(msg: dict[str, Any]) -> str | None:
    """:func:`check_server_event` for GPT-Live (``openai.types.live``): no extensions there."""
    return _check(msg, live_server_models())


def check_server_event(msg: dict[str, Any]) -> str | None:
    """None when ``msg`` validates against its type's model; else why not (one line per error).
    An extension event (:data:`EXTENSIONS`) passes; an unknown type does not."""
    if msg.get("type") in EXTENSIONS:
        return None
    return _check(msg, server_models())


def _check(msg: dict[str, Any], models: dict[str, type[pydantic.BaseModel]]) -> str | None:
    kind = msg.get("type")
    model = models.get(str(kind))
    if model is None:
        return f"{kind!r} is not a server event type of the openai package"
    try:
        model.model_validate(msg)
    except pydantic.ValidationError as exc:
        return f"{kind}: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return None
