"""backends.tool_format: the Hermes/Qwen2.5 <tool_call> stream parser and the chat rendering of tools and calls."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voiceagent.tools.format import CLOSE, OPEN, HermesToolParser, call_prefill, chat_messages, parse_call, tool_dicts
from voiceagent.tools.spec import Message, Tool, ToolCall

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = Tool("get_weather", "The weather in a city.", PARAMS)


def run(parser: HermesToolParser, *chunks: str) -> list[str | ToolCall]:
    out: list[str | ToolCall] = []
    for chunk in chunks:
        out += parser.push(chunk)
    return out + parser.flush()


def text_of(pieces: list[str | ToolCall]) -> str:
    return "".join(p for p in pieces if isinstance(p, str))


def calls_of(pieces: list[str | ToolCall]) -> list[ToolCall]:
    return [p for p in pieces if isinstance(p, ToolCall)]


# --------------------------------------------------------------------------- plain text


@pytest.mark.parametrize("text", ["", "Hello there.", "a < b, and b > a", "x <tool", "<", "<tool_cal", "</tool_call> stray", "<tool_call"])
def test_text_without_a_call_passes_through(text: str) -> None:
    pieces = run(HermesToolParser(), text)
    assert calls_of(pieces) == []
    assert text_of(pieces) == text


def test_text_that_cannot_start_a_tag_is_passed_on_at_once() -> None:
    parser = HermesToolParser()
    assert parser.push("a < b") == ["a < b"]
    assert parser.flush() == []


def test_possible_tag_start_is_held_until_it_turns_out_not_to_be_one() -> None:
    parser = HermesToolParser()
    assert parser.push("I think <tool") == ["I think "]
    assert parser.push("s are great") == ["<tools are great"]
    assert parser.flush() == []


def test_possible_tag_start_at_the_end_comes_out_at_flush() -> None:
    parser = HermesToolParser()
    assert text_of(parser.push("well <tool_c")) == "well "
    assert parser.flush() == ["<tool_c"]


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list('<>/_tolca \n{}"x')), max_size=80).filter(lambda s: OPEN not in s),
    cuts=st.lists(st.integers(0, 80), max_size=6),
)
def test_any_chunking_of_tagless_text_is_lossless(text: str, cuts: list[int]) -> None:
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    chunks = [text[a:b] for a, b in itertools.pairwise(bounds)]
    pieces = run(HermesToolParser(), *chunks)
    assert calls_of(pieces) == []
    assert text_of(pieces) == text


# --------------------------------------------------------------------------- calls


@pytest.mark.parametrize("cut", range(len("Let me check. " + CALL + " One moment.") + 1))
def test_call_split_anywhere_is_found_once(cut: int) -> None:
    before, after = "Let me check. ", " One moment."
    stream = before + CALL + after
    pieces = run(HermesToolParser(), stream[:cut], stream[cut:])
    calls = calls_of(pieces)
    assert len(calls) == 1
    assert calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    assert text_of(pieces) == before + after
    # the text before the call comes before it, the text after after it
    index = pieces.index(calls[0])
    assert text_of(pieces[:index]) == before
    assert text_of(pieces[index + 1 :]) == after


TOOLS_CALL = '<tools>\n{"name": "get_time", "arguments": {}}\n</tools>'  # as the Qwen2.5-Coder-1.5B writes it


@pytest.mark.parametrize("cut", range(len("Sure. " + TOOLS_CALL + " Done.") + 1))
def test_a_call_in_tools_tags_is_a_call_wherever_the_stream_splits(cut: int) -> None:
    stream = "Sure. " + TOOLS_CALL + " Done."
    pieces = run(HermesToolParser(), stream[:cut], stream[cut:])
    [call] = calls_of(pieces)
    assert (call.name, json.loads(call.arguments)) == ("get_time", {})
    assert text_of(pieces) == "Sure.  Done."  # no tag and no JSON is spoken


def test_each_call_ends_at_its_own_closing_tag() -> None:
    pieces = run(HermesToolParser(), "<tools>" + CALL[len(OPEN) :].replace(CLOSE, "</tool_call> x </tools>") + " after")
    [call] = calls_of(pieces)
    assert call.name == "get_weather"
    assert text_of(pieces) == " after"


def test_call_streamed_one_character_at_a_time() -> None:
    pieces = run(HermesToolParser(), *("Hi " + CALL))
    assert text_of(pieces) == "Hi "
    [call] = calls_of(pieces)
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})


def test_unclosed_call_is_parsed_at_flush() -> None:
    parser = HermesToolParser()
    assert parser.push('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n') == []
    [call] = parser.flush()
    assert isinstance(call, ToolCall)
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}


def test_unclosed_call_missing_its_braces_is_repaired_at_flush() -> None:
    parser = HermesToolParser()
    parser.push('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"')
    [call] = parser.flush()
    assert isinstance(call, ToolCall)
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}


def test_empty_unclosed_call_yields_nothing() -> None:
    parser = HermesToolParser()
    assert parser.push("ok <tool_call>\n") == ["ok "]
    assert parser.flush() == []


def test_two_calls_in_a_row() -> None:
    second = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'
    pieces = run(HermesToolParser(), CALL + "\n" + second)
    calls = calls_of(pieces)
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Paris"}, {"zone": "CET"}]
    assert text_of(pieces) == "\n"
    assert calls[0].call_id != calls[1].call_id


def test_text_after_a_call_streams_again() -> None:
    parser = HermesToolParser()
    first = parser.push(CALL)
    assert len(calls_of(first)) == 1
    assert parser.push(" and more") == [" and more"]


def test_open_tag_in_the_prompt() -> None:
    parser = HermesToolParser(open_tag=True)
    assert parser.open_tag_in_prompt is True
    pieces = run(parser, '{"name": "get_weather", "arguments": {"city": "Paris"}}\n', CLOSE, " bye")
    [call] = calls_of(pieces)
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert text_of(pieces) == " bye"


def test_without_open_tag_the_same_body_is_text() -> None:
    body = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    pieces = run(HermesToolParser(), body)
    assert calls_of(pieces) == []
    assert text_of(pieces) == body


def test_prefill_for_a_named_tool_then_the_rest() -> None:
    parser = HermesToolParser()
    out = parser.push(call_prefill([WEATHER], "get_weather"))
    out += parser.push('{"city": "Paris"}}\n</tool_call>')
    out += parser.flush()
    [call] = calls_of(out)
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert text_of(out) == ""


# --------------------------------------------------------------------------- parse_call


def test_parse_call_reads_name_and_arguments() -> None:
    call = parse_call('\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n')
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id.startswith("call_")
    assert call.call_id != parse_call('{"name": "get_weather", "arguments": {}}').call_id


def test_parse_call_accepts_parameters_and_string_arguments() -> None:
    assert json.loads(parse_call('{"name": "f", "parameters": {"a": 1}}').arguments) == {"a": 1}
    assert parse_call('{"name": "f", "arguments": "{\\"a\\": 1}"}').arguments == '{"a": 1}'
    assert json.loads(parse_call('{"name": "f"}').arguments) == {}


def test_parse_call_repairs_python_literals() -> None:
    call = parse_call("{'name': 'get_weather', 'arguments': {'city': 'Paris', 'metric': True}}")
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris", "metric": True}


def test_parse_call_with_broken_json_keeps_name_and_raw_arguments() -> None:
    call = parse_call('\n{"name": "get_weather", "arguments": {"city": Paris}}\n')
    assert call.name == "get_weather"
    assert call.arguments == '{"city": Paris}'


def test_parse_call_of_garbage() -> None:
    call = parse_call("  not a call at all  ")
    assert call.name == ""
    assert call.arguments == "not a call at all"


def test_broken_call_from_the_stream() -> None:
    pieces = run(HermesToolParser(), '<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}\n</tool_call>')
    [call] = calls_of(pieces)
    assert call.name == "get_weather"
    assert call.arguments == '{"city": Paris}'


# --------------------------------------------------------------------------- rendering


def test_chat_messages_render_calls_and_outputs() -> None:
    messages = [
        Message("system", "Be brief."),
        Message("user", "Weather in Paris?"),
        Message("assistant", "", tool_calls=(ToolCall("c1", "get_weather", '{"city": "Paris"}'),)),
        Message("tool", '{"temp": 21}', tool_call_id="c1"),
    ]
    as_objects = chat_messages(messages)
    as_text = chat_messages(messages, arguments_as_text=True)
    for rendered in (as_objects, as_text):
        assert [m["role"] for m in rendered] == ["system", "user", "assistant", "tool"]
        assert rendered[0] == {"role": "system", "content": "Be brief."}
        assert rendered[1] == {"role": "user", "content": "Weather in Paris?"}
        assert rendered[3] == {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "c1"}
        [call] = rendered[2]["tool_calls"]
        assert call["id"] == "c1"
        assert call["type"] == "function"
        assert call["function"]["name"] == "get_weather"
    assert as_objects[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert as_text[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'


def test_chat_messages_unreadable_arguments_become_an_empty_object() -> None:
    message = Message("assistant", "", tool_calls=(ToolCall("c1", "f", "nonsense"), ToolCall("c2", "g", "[1]")))
    [rendered] = chat_messages([message])
    assert [c["function"]["arguments"] for c in rendered["tool_calls"]] == [{}, {}]
    [as_text] = chat_messages([message], arguments_as_text=True)
    assert [c["function"]["arguments"] for c in as_text["tool_calls"]] == ["nonsense", "[1]"]


def test_tool_dicts() -> None:
    assert tool_dicts([WEATHER, Tool("now")]) == [
        {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": PARAMS}},
        {"type": "function", "function": {"name": "now", "description": "", "parameters": {"type": "object", "properties": {}}}},
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", ""),
        ("none", ""),
        ("required", "<tool_call>\n"),
        ("get_weather", '<tool_call>\n{"name": "get_weather", "arguments": '),
    ],
)
def test_call_prefill(choice: str, expected: str) -> None:
    assert call_prefill([WEATHER], choice) == expected


@pytest.mark.parametrize("choice", ["auto", "none", "required", "get_weather"])
def test_call_prefill_without_tools_is_empty(choice: str) -> None:
    assert call_prefill([], choice) == ""


def test_call_prefill_escapes_the_name() -> None:
    prefill = call_prefill([WEATHER], 'we"ird')
    assert prefill == '<tool_call>\n{"name": "we\\"ird", "arguments": '


# ---------------------------------------------------------------- bare JSON calls (no tags)


def _run_parser(parser: HermesToolParser, chunks: list[str]) -> list[str | ToolCall]:
    out: list[str | ToolCall] = []
    for chunk in chunks:
        out += parser.push(chunk)
    return out + parser.flush()


@pytest.mark.parametrize("cut", range(1, 56))
def test_a_bare_json_call_of_an_offered_tool_is_a_call_wherever_the_stream_splits(cut: int) -> None:
    text = ' {"name": "get_weather", "arguments": {"city": "Paris"}}'
    out = _run_parser(HermesToolParser(names=["get_weather"]), [text[:cut], text[cut:]])
    calls = [o for o in out if isinstance(o, ToolCall)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert "".join(o for o in out if isinstance(o, str)).strip() == ""


def test_a_bare_object_that_is_not_an_offered_call_is_spoken_as_text() -> None:
    for text in ('{"name": "Jupiter"} ok', '{"a": 1} and so on', '{"name": "x", "size": 3}', "{ not json at all"):
        out = _run_parser(HermesToolParser(names=["get_weather"]), [text[:5], text[5:]])
        assert out and all(isinstance(o, str) for o in out)
        assert "".join(o for o in out if isinstance(o, str)) == text


@pytest.mark.parametrize("cut", [1, 9, 30, 80])
def test_a_bare_call_of_a_tool_not_offered_is_a_call_not_text(cut: int) -> None:
    # As the 0.5B wrote it for "I would like to know the largest planet in our solar system": a
    # made-up tool.  As text it was spoken, JSON and all; as a call the caller rejects it.
    text = '{"name": "get_largest_planet", "arguments": {"type": "object", "properties": {"radius": {"type": "integer"}}}}'
    out = _run_parser(HermesToolParser(names=["get_time", "set_timer"]), [text[:cut], text[cut:]])
    assert [c.name for c in calls_of(out)] == ["get_largest_planet"] and text_of(out) == ""


def test_bare_json_is_not_read_without_offered_names_nor_after_text() -> None:
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert "".join(str(o) for o in _run_parser(HermesToolParser(), [call])) == call
    after_text = "Sure. " + call
    out = _run_parser(HermesToolParser(names=["get_weather"]), [after_text])
    assert all(isinstance(o, str) for o in out)


def test_a_bare_call_with_broken_json_is_still_a_call_for_the_caller_to_repair() -> None:
    out = _run_parser(HermesToolParser(names=["get_time"]), ['{"name": "get_time", "arguments": {"type": "object", "properties": {"}}}'])
    calls = [o for o in out if isinstance(o, ToolCall)]
    assert [c.name for c in calls] == ["get_time"]


# ------------------------------------- calls the 1.5B writes without tags (eval_tools, 2026-11-23)

FENCED = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```'
DOUBLED_EMPTY = '{{"name": "get_time", "arguments": {}}}}'  # one brace too many, as written
DOUBLED = '{{"name": "set_timer", "arguments": {"seconds": 10, "label": "Check the oven"}}}'
NAMES = ["get_weather", "get_time", "set_timer"]


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        (FENCED, "get_weather", {"city": "Paris"}),
        (DOUBLED_EMPTY, "get_time", {}),
        (DOUBLED, "set_timer", {"seconds": 10, "label": "Check the oven"}),
    ],
)
def test_a_fenced_or_doubled_brace_call_is_one_call_and_no_text_wherever_it_splits(text: str, name: str, args: dict[str, object]) -> None:
    for cut in range(1, len(text)):
        for tail in ("", " Then more text."):
            out = _run_parser(HermesToolParser(names=NAMES), [text[:cut], text[cut:] + tail])
            assert [(c.name, json.loads(c.arguments)) for c in calls_of(out)] == [(name, args)], (cut, out)
            assert text_of(out).strip() == tail.strip(), (cut, out)


def test_a_fenced_call_streamed_one_character_at_a_time() -> None:
    out = run(HermesToolParser(names=NAMES), *FENCED)
    assert [c.name for c in calls_of(out)] == ["get_weather"] and text_of(out) == ""


def test_a_fence_that_holds_no_offered_call_is_text_as_written() -> None:
    not_calls = ('```json\n{"a": 1}\n``` done', "```python\nprint(1)\n```", "`code` here", '```json\n{"name": "launch"}\n```')
    for text in not_calls:
        out = _run_parser(HermesToolParser(names=NAMES), [text[:4], text[4:]])
        assert calls_of(out) == [] and text_of(out) == text, out


def test_fenced_and_doubled_calls_are_not_read_without_offered_names() -> None:
    for text in (FENCED, DOUBLED):
        out = run(HermesToolParser(), text)
        assert calls_of(out) == [] and text_of(out) == text
