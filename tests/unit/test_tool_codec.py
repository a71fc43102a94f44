"""transports.realtime_codec, the tool parts: tools and tool_choice in, function_call items out."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from voiceagent.config import Config
from voiceagent.errors import ProtocolError
from voiceagent.events import CallSummary, FunctionCallAdded, ResponseDone, ResponseStatus, ToolOutputAdded
from voiceagent.settings import settings_from_config
from voiceagent.tools.spec import Tool
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import CreateResponse, CreateToolOutput, UpdateSession

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
GA_TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city.", "parameters": PARAMS}
CHAT_TOOL = {"type": "function", "function": {"name": "get_time", "description": "The time in a zone.", "parameters": {"type": "object"}}}
WEATHER = Tool("get_weather", "The weather in a city.", PARAMS)


def last(messages: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The last message of type ``kind`` (response.done is followed by output_audio_buffer.stopped
    and rate_limits.updated)."""
    return [m for m in messages if m["type"] == kind][-1]


def codec(tools: tuple[Tool, ...] = (), tool_choice: str = "auto") -> RealtimeCodec:
    settings = dataclasses.replace(settings_from_config(Config()), tools=tools, tool_choice=tool_choice)
    return RealtimeCodec(settings, 22050)


def update(c: RealtimeCodec, session: dict[str, Any]) -> UpdateSession:
    cmd = c.decode(json.dumps({"type": "session.update", "event_id": "evt_u", "session": session}))
    assert isinstance(cmd, UpdateSession)
    return cmd


def create_response(c: RealtimeCodec, response: dict[str, Any]) -> CreateResponse:
    cmd = c.decode(json.dumps({"type": "response.create", "event_id": "evt_r", "response": response}))
    assert isinstance(cmd, CreateResponse)
    return cmd


def error_of(c: RealtimeCodec, msg: dict[str, Any]) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        c.decode(json.dumps(msg))
    return info.value


# --------------------------------------------------------------------------- session.update: tools


def test_session_update_tools_in_both_shapes() -> None:
    cmd = update(codec(), {"tools": [GA_TOOL, CHAT_TOOL]})
    tools = cmd.changes["tools"]
    assert isinstance(tools, tuple)
    assert all(isinstance(t, Tool) for t in tools)
    assert tools == (
        Tool("get_weather", "The weather in a city.", PARAMS),
        Tool("get_time", "The time in a zone.", {"type": "object"}),
    )
    assert cmd.event_id == "evt_u"


def test_session_update_tool_defaults() -> None:
    [tool] = update(codec(), {"tools": [{"name": "now"}]}).changes["tools"]
    assert tool == Tool("now", "", {"type": "object", "properties": {}})


def test_session_update_without_tools_changes_no_tools() -> None:
    changes = update(codec(), {"instructions": "Be brief."}).changes
    assert "tools" not in changes
    assert "tool_choice" not in changes


def test_session_update_empty_tools() -> None:
    assert update(codec(), {"tools": []}).changes["tools"] == ()


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ({"name": "x"}, "session.tools"),
        ("get_weather", "session.tools"),
        ([{"name": f"t{n}"} for n in range(129)], "session.tools"),
        ([5], "session.tools[0]"),
        ([GA_TOOL, {"type": "mcp", "server_url": "http://127.0.0.1:1/mcp", "require_approval": "never"}], "session.tools[1].server_label"),
        ([{"type": "file_search"}], "session.tools[0]"),
        ([{"type": "function"}], "session.tools[0].name"),
        ([{"type": "function", "name": "has space"}], "session.tools[0].name"),
        ([{"type": "function", "name": ""}], "session.tools[0].name"),
        ([{"type": "function", "name": "x" * 65}], "session.tools[0].name"),
        ([{"type": "function", "name": 7}], "session.tools[0].name"),
        ([{"type": "function", "function": {"name": "a.b"}}], "session.tools[0].name"),
        ([GA_TOOL, CHAT_TOOL, {"type": "function", "name": "get_weather"}], "session.tools[2].name"),
        ([{"type": "function", "name": "f", "description": 3}], "session.tools[0].description"),
        ([{"type": "function", "name": "f", "parameters": {"type": "array"}}], "session.tools[0].parameters"),
        ([{"type": "function", "name": "f", "parameters": "object"}], "session.tools[0].parameters"),
        ([{"type": "function", "name": "f", "parameters": []}], "session.tools[0].parameters"),
        ([{"type": "function", "name": "f", "parameters": {"type": "object", "description": "x" * 16_001}}], "session.tools[0].parameters"),
    ],
)
def test_invalid_tools(tools: Any, param: str) -> None:
    err = error_of(codec(), {"type": "session.update", "event_id": "evt_u", "session": {"tools": tools}})
    assert err.code == "invalid_value"
    assert err.param == param
    assert err.event_id == "evt_u"


def test_max_tools_is_accepted() -> None:
    tools = update(codec(), {"tools": [{"name": f"t{n}"} for n in range(128)]}).changes["tools"]
    assert [t.name for t in tools] == [f"t{n}" for n in range(128)]


def test_rejected_tools_leave_the_formats_unchanged() -> None:
    c = codec()
    session = {"audio": {"input": {"format": {"type": "audio/pcmu"}}}, "tools": [{"name": "bad name"}]}
    with pytest.raises(ProtocolError):
        c.decode(json.dumps({"type": "session.update", "session": session}))
    assert c.audio.input_format == "audio/pcm"


# --------------------------------------------------------------------------- session.update: tool_choice


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ({"type": "function", "name": "get_weather"}, "get_weather"),
        ({"type": "function", "function": {"name": "get_time"}}, "get_time"),
    ],
)
def test_tool_choice_with_tools_in_the_same_update(choice: Any, expected: str) -> None:
    changes = update(codec(), {"tools": [GA_TOOL, CHAT_TOOL], "tool_choice": choice}).changes
    assert changes["tool_choice"] == expected


def test_tool_choice_names_a_tool_of_the_session() -> None:
    changes = update(codec((WEATHER,)), {"tool_choice": {"type": "function", "name": "get_weather"}}).changes
    assert changes == {"tool_choice": "get_weather"}


@pytest.mark.parametrize(
    ("session", "tools"),
    [
        ({"tool_choice": {"type": "function", "name": "get_weather"}}, ()),
        ({"tool_choice": {"type": "function", "name": "nope"}}, (WEATHER,)),
        ({"tools": [CHAT_TOOL], "tool_choice": {"type": "function", "name": "get_weather"}}, (WEATHER,)),
        ({"tool_choice": "sometimes"}, (WEATHER,)),
        ({"tool_choice": "get_weather"}, (WEATHER,)),
        ({"tool_choice": {"type": "function"}}, (WEATHER,)),
        ({"tool_choice": {"type": "function", "name": 5}}, (WEATHER,)),
        ({"tool_choice": {"name": "get_weather"}}, (WEATHER,)),
        ({"tool_choice": None}, (WEATHER,)),
        ({"tool_choice": ["auto"]}, (WEATHER,)),
    ],
)
def test_invalid_tool_choice(session: dict[str, Any], tools: tuple[Tool, ...]) -> None:
    err = error_of(codec(tools), {"type": "session.update", "session": session})
    assert err.code == "invalid_value"
    assert err.param == "session.tool_choice"


def test_new_tools_without_the_chosen_one_reset_tool_choice() -> None:
    changes = update(codec((WEATHER,), "get_weather"), {"tools": [CHAT_TOOL]}).changes
    assert changes["tool_choice"] == "auto"
    assert [t.name for t in changes["tools"]] == ["get_time"]


@pytest.mark.parametrize(("tools", "choice"), [((WEATHER,), "get_weather"), ((WEATHER,), "required"), ((), "none")])
def test_new_tools_keep_a_tool_choice_that_still_fits(tools: tuple[Tool, ...], choice: str) -> None:
    changes = update(codec(tools, choice), {"tools": [GA_TOOL]}).changes
    assert "tool_choice" not in changes


# --------------------------------------------------------------------------- response.create


def test_response_create_with_tools_and_tool_choice() -> None:
    cmd = create_response(codec(), {"tools": [GA_TOOL], "tool_choice": {"type": "function", "name": "get_weather"}})
    assert cmd.options.tools == (WEATHER,)
    assert cmd.options.tool_choice == "get_weather"
    assert cmd.event_id == "evt_r"


def test_response_create_without_tools_keeps_the_session_ones() -> None:
    cmd = create_response(codec((WEATHER,)), {})
    assert cmd.options.tools is None
    assert cmd.options.tool_choice is None


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_response_create_tool_choice_only(choice: str) -> None:
    cmd = create_response(codec((WEATHER,)), {"tool_choice": choice})
    assert cmd.options.tools is None
    assert cmd.options.tool_choice == choice


def test_response_create_tool_choice_names_a_session_tool() -> None:
    assert (
        create_response(codec((WEATHER,)), {"tool_choice": {"type": "function", "name": "get_weather"}}).options.tool_choice
        == "get_weather"
    )


def test_response_create_empty_tools() -> None:
    assert create_response(codec((WEATHER,)), {"tools": []}).options.tools == ()


@pytest.mark.parametrize(
    ("response", "tools", "param"),
    [
        ({"tool_choice": {"type": "function", "name": "get_weather"}}, (), "response.tool_choice"),
        ({"tools": [CHAT_TOOL], "tool_choice": {"type": "function", "name": "get_weather"}}, (WEATHER,), "response.tool_choice"),
        ({"tool_choice": "always"}, (WEATHER,), "response.tool_choice"),
        ({"tools": "get_weather"}, (), "response.tools"),
        ({"tools": [{"type": "function", "name": "bad name"}]}, (), "response.tools[0].name"),
        ({"tools": [GA_TOOL, GA_TOOL]}, (), "response.tools[1].name"),
        ({"tools": [{"name": "f", "parameters": {"type": "string"}}]}, (), "response.tools[0].parameters"),
    ],
)
def test_response_create_invalid_tools(response: dict[str, Any], tools: tuple[Tool, ...], param: str) -> None:
    err = error_of(codec(tools), {"type": "response.create", "event_id": "evt_r", "response": response})
    assert err.code == "invalid_value"
    assert err.param == param
    assert err.event_id == "evt_r"


# --------------------------------------------------------------------------- conversation.item.create: function_call_output


def test_function_call_output_item() -> None:
    output = json.dumps({"temp": 21, "sky": "clear"})
    item = {"type": "function_call_output", "call_id": "c1", "output": output}
    cmd = codec().decode(json.dumps({"type": "conversation.item.create", "event_id": "evt_o", "item": item}))
    assert cmd == CreateToolOutput("c1", output, "evt_o")


@pytest.mark.parametrize(
    ("item", "code", "param"),
    [
        ({"type": "function_call_output", "output": "{}"}, "missing_field", "item.call_id"),
        ({"type": "function_call_output", "call_id": 5, "output": "{}"}, "invalid_value", "item.call_id"),
        ({"type": "function_call_output", "call_id": "c1"}, "missing_field", "item.output"),
        ({"type": "function_call_output", "call_id": "c1", "output": {"temp": 21}}, "invalid_value", "item.output"),
        ({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}, "unsupported_item_type", "item.type"),
    ],
)
def test_invalid_function_call_output_item(item: dict[str, Any], code: str, param: str) -> None:
    err = error_of(codec(), {"type": "conversation.item.create", "event_id": "evt_o", "item": item})
    assert err.code == code
    assert err.param == param
    assert err.event_id == "evt_o"


# --------------------------------------------------------------------------- encode


def test_encode_function_call_added() -> None:
    arguments = '{"city": "Paris"}'
    ev = FunctionCallAdded(
        t=0.0,
        gen=0,
        session="s",
        response_id="resp_1",
        item_id="item_c",
        previous_item_id="item_m",
        output_index=1,
        call_id="call_1",
        name="get_weather",
        arguments=arguments,
    )
    msgs = codec().encode(ev)
    assert [m["type"] for m in msgs] == [
        "response.output_item.added",
        "conversation.item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
    ]
    assert len({m["event_id"] for m in msgs}) == len(msgs)
    added, conv_added, delta, args_done, item_done, conv_done = msgs

    in_progress = {
        "id": "item_c",
        "object": "realtime.item",
        "type": "function_call",
        "status": "in_progress",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": "",
    }
    completed = {**in_progress, "status": "completed", "arguments": arguments}
    assert added["response_id"] == "resp_1"
    assert added["output_index"] == 1
    assert added["item"] == in_progress
    assert conv_added["previous_item_id"] == "item_m"
    assert conv_added["item"] == in_progress
    ids = {"response_id": "resp_1", "item_id": "item_c", "output_index": 1, "call_id": "call_1"}
    assert {k: delta[k] for k in ids} == ids
    assert delta["delta"] == arguments
    assert {k: args_done[k] for k in ids} == ids
    assert args_done["name"] == "get_weather"
    assert args_done["arguments"] == arguments
    assert item_done["response_id"] == "resp_1"
    assert item_done["output_index"] == 1
    assert item_done["item"] == completed
    assert conv_done["previous_item_id"] == "item_m"
    assert conv_done["item"] == completed


def test_encode_tool_output_added() -> None:
    ev = ToolOutputAdded(t=0.0, gen=0, session="s", item_id="item_o", previous_item_id="item_c", call_id="call_1", output='{"temp": 21}')
    msgs = codec().encode(ev)
    assert [m["type"] for m in msgs] == ["conversation.item.added", "conversation.item.done"]
    item = {
        "id": "item_o",
        "object": "realtime.item",
        "type": "function_call_output",
        "call_id": "call_1",
        "output": '{"temp": 21}',
        "status": "completed",
    }
    for m in msgs:
        assert m["previous_item_id"] == "item_c"
        assert m["item"] == item


def test_response_done_lists_calls_after_the_message() -> None:
    calls = (
        CallSummary("item_c1", "call_1", "get_weather", '{"city": "Paris"}'),
        CallSummary("item_c2", "call_2", "get_time", '{"zone": "CET"}'),
    )
    ev = ResponseDone(
        t=0.0,
        gen=0,
        session="s",
        response_id="resp_1",
        item_id="item_m",
        status=ResponseStatus.COMPLETED,
        text="Let me check.",
        calls=calls,
    )
    done = last(codec().encode(ev), "response.done")
    assert done["type"] == "response.done"
    output = done["response"]["output"]
    assert [o["type"] for o in output] == ["message", "function_call", "function_call"]
    assert output[0]["id"] == "item_m"
    assert output[0]["content"][0]["transcript"] == "Let me check."
    assert output[1] == {
        "id": "item_c1",
        "object": "realtime.item",
        "type": "function_call",
        "status": "completed",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert (output[2]["id"], output[2]["call_id"], output[2]["name"], output[2]["arguments"]) == (
        "item_c2",
        "call_2",
        "get_time",
        '{"zone": "CET"}',
    )


def test_response_done_without_calls_has_only_the_message() -> None:
    ev = ResponseDone(t=0.0, gen=0, session="s", response_id="resp_1", item_id="item_m", status=ResponseStatus.COMPLETED, text="Hi.")
    output = last(codec().encode(ev), "response.done")["response"]["output"]
    assert [o["type"] for o in output] == ["message"]


# --------------------------------------------------------------------------- session object


def test_session_object_shows_tools_and_a_named_tool_choice() -> None:
    time_tool = Tool("get_time", "The time in a zone.", {"type": "object"})
    obj = codec((WEATHER, time_tool), "get_time").session_object()
    assert obj["tools"] == [
        {"type": "function", "name": "get_weather", "description": "The weather in a city.", "parameters": PARAMS},
        {"type": "function", "name": "get_time", "description": "The time in a zone.", "parameters": {"type": "object"}},
    ]
    assert obj["tool_choice"] == {"type": "function", "name": "get_time"}


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_session_object_plain_tool_choice(choice: str) -> None:
    obj = codec((WEATHER,), choice).session_object()
    assert obj["tool_choice"] == choice
    assert [t["name"] for t in obj["tools"]] == ["get_weather"]


def test_session_object_default_has_no_tools() -> None:
    obj = RealtimeCodec(settings_from_config(Config()), 22050).session_object()
    assert obj["tools"] == []
    assert obj["tool_choice"] == "auto"


def test_session_update_tools_round_trip_through_the_session_object() -> None:
    c = codec()
    changes = update(c, {"tools": [GA_TOOL, CHAT_TOOL], "tool_choice": "required"}).changes
    c.settings = dataclasses.replace(c.settings, **changes)
    obj = c.session_object()
    assert obj["tools"] == [GA_TOOL, {"type": "function", **CHAT_TOOL["function"]}]
    assert obj["tool_choice"] == "required"


def test_text_only_responses_render_output_text_events() -> None:
    from voiceagent.events import OutputTranscriptDelta, ResponseCreated

    rt = codec()
    update = rt.decode(json.dumps({"type": "session.update", "session": {"output_modalities": ["text"]}}))
    assert isinstance(update, UpdateSession) and update.changes["audio"] is False
    create = rt.decode(json.dumps({"type": "response.create", "response": {"output_modalities": ["audio"]}}))
    assert isinstance(create, CreateResponse) and create.options.audio is True
    with pytest.raises(ProtocolError) as bad:
        rt.decode(json.dumps({"type": "response.create", "response": {"output_modalities": ["video"]}}))
    assert bad.value.code == "invalid_value" and bad.value.param == "response.output_modalities"
    created = rt.encode(ResponseCreated(t=0.0, gen=1, session="s", response_id="r1", item_id="i1", audio=False))
    assert created[-1]["type"] == "response.content_part.added" and created[-1]["part"] == {"type": "text", "text": ""}
    delta = rt.encode(OutputTranscriptDelta(t=0.0, gen=1, session="s", response_id="r1", item_id="i1", text="Paris.", clause_ms=0.0))
    assert [(m["type"], m["delta"]) for m in delta] == [("response.output_text.delta", "Paris.")]
    done = rt.encode(
        ResponseDone(t=0.0, gen=1, session="s", response_id="r1", item_id="i1", status=ResponseStatus.COMPLETED, text="Paris.")
    )
    types = [m["type"] for m in done]
    assert "response.output_text.done" in types and "response.output_audio.done" not in types
    assert last(done, "response.done")["response"]["output"][0]["content"] == [{"type": "output_text", "text": "Paris."}]
