"""Per-response fields of ``response.create`` (out-of-band, ``input``, ``metadata``,
``max_output_tokens``) and ``conversation.item.create``'s ``previous_item_id``: decoded by the
codec, applied by the session (scripted fakes, no models)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from voiceagent.clock import VirtualClock
from voiceagent.config import Config, LlmConfig
from voiceagent.conversation.history import CANCELLED_OUTPUT
from voiceagent.conversation.reply import ResponseOptions
from voiceagent.errors import ProtocolError
from voiceagent.events import ErrorEvent, ItemsDropped, ResponseCreated, ResponseDone, ResponseStatus, TextItemAdded, ToolOutputAdded
from voiceagent.session import Session
from voiceagent.settings import InputItem, settings_from_config
from voiceagent.tools.spec import Message, Tool, ToolCall
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import CreateItem, CreateResponse

from .fakes import EventLog, FakeEngines, FakeLlm
from .test_prompt_fit import words
from .test_session import PROMPT_HEAD, MakeFakes, Run, make_config, make_fakes, running, tokens

__all__ = ["make_fakes"]  # the fixture, imported for pytest


def decode(msg: dict[str, Any]) -> Any:
    return RealtimeCodec(settings_from_config(Config()), 22050).decode(json.dumps(msg))


# --------------------------------------------------------------------------- decoding


def test_response_create_decodes_the_per_response_fields() -> None:
    cmd = decode(
        {
            "type": "response.create",
            "response": {
                "conversation": "none",
                "metadata": {"topic": "summary"},
                "max_output_tokens": 20,
                "input": [
                    {"type": "item_reference", "id": "item_7"},
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Summarise."}]},
                ],
            },
        }
    )
    assert isinstance(cmd, CreateResponse)
    assert (cmd.options.out_of_band, cmd.options.metadata, cmd.options.max_tokens) == (True, {"topic": "summary"}, 20)
    assert cmd.options.input == (InputItem(ref="item_7"), InputItem("user", "Summarise."))
    plain = decode({"type": "response.create"})
    assert plain.options == ResponseOptions()  # every field the session's


@pytest.mark.parametrize(
    ("response", "param"),
    [
        ({"conversation": "other"}, "response.conversation"),
        ({"metadata": {"k": 5}}, "response.metadata"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "response.metadata"),
        ({"max_output_tokens": 0}, "response.max_output_tokens"),
        ({"input": "text"}, "response.input"),
        ({"input": [{"type": "function_call", "name": "x"}]}, "response.input[0]"),
        ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_audio"}]}]}, "response.input[0].content"),
    ],
)
def test_bad_per_response_fields_are_refused_with_their_param(response: dict[str, Any], param: str) -> None:
    with pytest.raises(ProtocolError) as info:
        decode({"type": "response.create", "response": response})
    assert info.value.param == param


def test_item_create_carries_previous_item_id() -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    cmd = decode({"type": "conversation.item.create", "previous_item_id": "item_3", "item": item})
    assert isinstance(cmd, CreateItem) and cmd.previous_item_id == "item_3"
    with pytest.raises(ProtocolError) as info:
        decode({"type": "conversation.item.create", "previous_item_id": 3, "item": item})
    assert info.value.param == "previous_item_id"


# --------------------------------------------------------------------------- the session


def test_an_out_of_band_response_leaves_the_conversation_untouched(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("A short summary."), tokens("Hello again.")]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            user = await session.add_text("Tell me about Paris")
            before = [i.id for i in session.history.items]
            rid = await session.create_response(out_of_band=True, metadata={"purpose": "summary"}, max_output_tokens=12)
            _, created = await log.wait_type(ResponseCreated, response_id=rid)
            _, done = await log.wait_type(ResponseDone, response_id=rid)
            assert (created.in_conversation, created.metadata) == (False, {"purpose": "summary"})
            assert (done.status, done.text, done.metadata) == (ResponseStatus.COMPLETED, "A short summary.", {"purpose": "summary"})
            assert [i.id for i in session.history.items] == before == [user]
            # The next (in-band) response does not read the out-of-band one, and has the session's limit.
            rid2 = await session.create_response()
            await log.wait_type(ResponseDone, response_id=rid2)
            first, second = fakes.llm.calls.items
            assert first.max_tokens == 12 and second.max_tokens == session.settings.max_output_tokens
            assert second.messages == (*PROMPT_HEAD, Message("user", "Tell me about Paris"))
            assert len(session.history.items) == 2

    run(main(), 20)


def test_a_response_with_input_reads_those_items_instead_of_the_conversation(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("Positive.")]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await session.add_text("Unrelated chatter")
            liked = await session.add_text("I loved the film")
            items = (InputItem("system", "Classify the sentiment."), InputItem(ref=liked))
            rid = await session.create_response("Answer with one word.", out_of_band=True, input=items)
            await log.wait_type(ResponseDone, response_id=rid)
            [call] = fakes.llm.calls.items
            assert call.messages == (
                Message("system", "Answer with one word."),
                Message("system", "Classify the sentiment."),
                Message("user", "I loved the film"),
            )
            with pytest.raises(ProtocolError) as info:
                await session.create_response(input=(InputItem(ref="item_nowhere"),))
            assert (info.value.code, info.value.param) == ("item_not_found", "response.input[0].id")
            assert session.active_response_id is None  # nothing started

    run(main(), 20)


def test_an_out_of_band_tool_call_is_reported_but_not_added(run: Run, make_fakes: MakeFakes) -> None:
    tool = Tool("classify", "Record a class.", {"type": "object", "properties": {"label": {"type": "string"}}})
    fakes = make_fakes(llm=FakeLlm([[ToolCall("call_1", "classify", '{"label": "happy"}')]]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            await session.add_text("I am so happy")
            rid = await session.create_response(out_of_band=True, tools=(tool,), tool_choice="required")
            _, done = await log.wait_type(ResponseDone, response_id=rid)
            assert [(c.call_id, c.name) for c in done.calls] == [("call_1", "classify")]
            assert session.history.call("call_1") is None
            assert len(session.history.items) == 1

    run(main(), 20)


def test_previous_item_id_inserts_after_that_item(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes()

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            a = await session.add_text("first")
            b = await session.add_text("third")
            c = await session.add_text("second", previous_item_id=a)
            _, added = await log.wait_type(TextItemAdded, item_id=c)
            assert added.previous_item_id == a
            assert [i.id for i in session.history.items] == [a, c, b]
            d = await session.add_text("zeroth", previous_item_id="root")
            _, added = await log.wait_type(TextItemAdded, item_id=d)
            assert added.previous_item_id is None
            assert [i.id for i in session.history.items] == [d, a, c, b]
            with pytest.raises(ProtocolError) as info:
                await session.add_text("lost", previous_item_id="item_missing")
            assert (info.value.code, info.value.param) == ("item_not_found", "previous_item_id")
            assert len(session.history.items) == 4

    run(main(), 20)


# --------------------------------------------------------------------------- rendering


def test_the_codec_keeps_out_of_band_responses_out_of_the_conversation_events() -> None:
    codec = RealtimeCodec(settings_from_config(Config()), 22050)
    r = {"t": 0.0, "gen": 1, "session": "s", "response_id": "resp_1", "item_id": "item_1"}
    created = codec.encode(ResponseCreated(**r, audio=False, in_conversation=False, metadata={"k": "v"}))
    done = codec.encode(ResponseDone(**r, status=ResponseStatus.COMPLETED, text="Done.", metadata={"k": "v"}))
    types = [m["type"] for m in created + done]
    assert not any(t.startswith("conversation.item") for t in types), types
    assert created[0]["response"]["conversation_id"] is None and created[0]["response"]["metadata"] == {"k": "v"}
    (response,) = (m["response"] for m in done if m["type"] == "response.done")
    assert response["metadata"] == {"k": "v"} and response["conversation_id"] is None
    in_band = codec.encode(ResponseCreated(**{**r, "response_id": "resp_2"}, audio=False))
    assert "conversation.item.added" in [m["type"] for m in in_band]
    assert codec.pending()["out_of_band"] == 0


# --------------------------------------------------------------------------- out of band leaves the history alone


def test_an_out_of_band_response_does_not_close_open_calls_in_the_conversation(run: Run, make_fakes: MakeFakes) -> None:
    tool = Tool("lookup", "Look something up.", {"type": "object", "properties": {}})
    fakes = make_fakes(llm=FakeLlm([[ToolCall("call_1", "lookup", "{}")], tokens("A summary."), tokens("Still open.")]))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(tools=(tool,))
            await session.add_text("Look it up")
            _, done = await log.wait_type(ResponseDone, response_id=await session.create_response())
            assert [c.call_id for c in done.calls] == ["call_1"]
            before = list(session.history.items)
            for kwargs in ({"out_of_band": True}, {"input": (InputItem("user", "Summarise."),)}):
                rid = await session.create_response(**kwargs)  # type: ignore[arg-type]
                _, done = await log.wait_type(ResponseDone, response_id=rid)
                assert done.status is ResponseStatus.COMPLETED
            # The call is still open: the client may still send its output.
            assert session.history.items[: len(before)] == before and session.history.output_of("call_1") is None
            assert log.of_type(ToolOutputAdded) == []
            # The out-of-band prompt showed the call closed, in that prompt only.
            assert Message("tool", CANCELLED_OUTPUT, tool_call_id="call_1") in fakes.llm.calls.items[1].messages
            await session.add_tool_output("call_1", "found it")

    run(main(), 20)


def test_an_out_of_band_response_that_does_not_fit_fails_and_cuts_nothing(run: Run) -> None:
    fakes = FakeEngines(llm=FakeLlm(default=["Fine."]), window=200, count=words)

    async def main() -> None:
        session = Session(fakes.engines, Config(llm=LlmConfig(max_tokens=40)), clock=VirtualClock())
        await session.start()
        log = EventLog(session)
        log.start()
        try:
            for turn in range(8):
                await session.add_text(" ".join([f"t{turn}"] * 12))
            before = [i.id for i in session.history.items]
            rid = await session.create_response(out_of_band=True)
            _, done = await log.wait_type(ResponseDone, response_id=rid)
            _, error = await log.wait_type(ErrorEvent)
            assert done.status is ResponseStatus.FAILED
            assert "does not cut" in error.message
            assert [i.id for i in session.history.items] == before
            assert log.of_type(ItemsDropped) == []
            assert fakes.llm.calls.items == []
            # An in-band response cuts as usual.
            _, done = await log.wait_type(ResponseDone, response_id=await session.create_response())
            assert done.status is ResponseStatus.COMPLETED and log.of_type(ItemsDropped)
        finally:
            await session.aclose()
            await log.finished()

    try:
        run(main(), 20)
    finally:
        fakes.close()
