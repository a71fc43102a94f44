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
from openai.types.realtime.realtime_client_event import RealtimeClientEvent
from openai.types.realtime.realtime_server_event import RealtimeServerEvent

__all__ = ["EXTENSIONS", "check_server_event", "client_event_types", "server_event_types"]

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


def check_server_event(msg: dict[str, Any]) -> str | None:
    """None when ``msg`` validates against its type's model; else why not (one line per error).
    An extension event (:data:`EXTENSIONS`) passes; an unknown type does not."""
    kind = msg.get("type")
    if kind in EXTENSIONS:
        return None
    model = server_models().get(str(kind))
    if model is None:
        return f"{kind!r} is not a server event type of the openai package"
    try:
        model.model_validate(msg)
    except pydantic.ValidationError as exc:
        return f"{kind}: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return None
