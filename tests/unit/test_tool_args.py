"""tool_args: lenient parsing of a model's call arguments, repair, coercion and the schema check."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voiceagent.tools.args import CheckedArguments, check_arguments, loads_lenient
from voiceagent.tools.spec import Tool

WEATHER = Tool(
    "get_weather",
    "The weather in a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "threshold": {"type": "number"},
            "metric": {"type": "boolean"},
        },
        "required": ["city"],
    },
)


def parsed(checked: CheckedArguments) -> Any:
    assert checked.arguments is not None
    return json.loads(checked.arguments)


# --------------------------------------------------------------------------- loads_lenient


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"city": "Paris"}', {"city": "Paris"}),
        ('  {"a": [1, 2]}  ', {"a": [1, 2]}),
        ('{"city": "Paris",}', {"city": "Paris"}),
        ('{"a": [1, 2,], }', {"a": [1, 2]}),
        ('{"city": "Paris"', {"city": "Paris"}),
        ('{"a": {"b": [1, 2', {"a": {"b": [1, 2]}}),
        ('{"city": "Par', {"city": "Par"}),
        ("{'city': 'Paris'}", {"city": "Paris"}),
        ("{'ok': True, 'none': None, 'off': False}", {"ok": True, "none": None, "off": False}),
        ("{'ok': true, 'x': null}", {"ok": True, "x": None}),
        ("{'city': 'Paris',", {"city": "Paris"}),
        ("[1, 2]", [1, 2]),
        ("5", 5),
    ],
)
def test_loads_lenient_reads_and_repairs(text: str, expected: Any) -> None:
    assert loads_lenient(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "   ", "not json at all", "{]", "}{", '{"a": 1}}', "{'a': {1, 2}}", "{'a': b'bytes'}", "{'a': 1j}", "<tool_call>"],
)
def test_loads_lenient_returns_none_when_hopeless(text: str) -> None:
    assert loads_lenient(text) is None


def test_loads_lenient_literal_repair_keeps_string_contents() -> None:
    # Only the literals true/false/null are Python's True/False/None, not the same letters inside a string.
    assert loads_lenient("{'query': 'is it true or false', 'note': 'nullify'}") == {"query": "is it true or false", "note": "nullify"}


# --------------------------------------------------------------------------- check_arguments: accepted


def test_valid_json_passes_unchanged() -> None:
    raw = '{"city": "Paris", "days": 3, "threshold": 1.5, "metric": true}'
    checked = check_arguments(WEATHER, raw)
    assert checked.problem is None
    assert checked.repaired is False
    assert parsed(checked) == json.loads(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"city": "Paris",}', {"city": "Paris"}),
        ('{"city": "Paris"', {"city": "Paris"}),
        ('{"city": "Paris", "days": 2', {"city": "Paris", "days": 2}),
        ("{'city': 'Paris', 'metric': True}", {"city": "Paris", "metric": True}),
    ],
)
def test_repaired_arguments_are_accepted_and_marked(raw: str, expected: dict[str, Any]) -> None:
    checked = check_arguments(WEATHER, raw)
    assert checked.problem is None
    assert checked.repaired is True
    assert parsed(checked) == expected


def test_repaired_arguments_are_still_checked() -> None:
    checked = check_arguments(WEATHER, "{'city': 'Paris', 'days': None}")
    assert checked.repaired is True
    assert parsed(checked) == {"city": "Paris", "days": None}
    assert checked.problem is not None
    assert checked.problem.startswith("days:")


def test_arguments_wrapped_in_a_json_string() -> None:
    raw = json.dumps(json.dumps({"city": "Paris", "days": 2}))
    checked = check_arguments(WEATHER, raw)
    assert checked.problem is None
    assert checked.repaired is True
    assert parsed(checked) == {"city": "Paris", "days": 2}


@pytest.mark.parametrize(
    ("field", "raw_value", "expected"),
    [
        ("days", "5", 5),
        ("days", " -12 ", -12),
        ("threshold", "5", 5.0),
        ("threshold", "2.5", 2.5),
        ("metric", "true", True),
        ("metric", "False", False),
    ],
)
def test_strings_coerced_to_the_schema_type(field: str, raw_value: str, expected: Any) -> None:
    checked = check_arguments(WEATHER, json.dumps({"city": "Paris", field: raw_value}))
    assert checked.problem is None
    assert checked.repaired is True
    value = parsed(checked)[field]
    assert value == expected
    assert type(value) is type(expected)


def test_string_property_is_not_coerced() -> None:
    checked = check_arguments(WEATHER, '{"city": "5"}')
    assert checked.problem is None
    assert checked.repaired is False
    assert parsed(checked) == {"city": "5"}


@pytest.mark.parametrize("raw_value", ["abc", "1.5", "nan", "1" * 19])
def test_uncoercible_strings_stay_and_fail(raw_value: str) -> None:
    checked = check_arguments(WEATHER, json.dumps({"city": "Paris", "days": raw_value}))
    assert checked.problem is not None
    assert checked.problem.startswith("days:")
    assert parsed(checked)["days"] == raw_value


def test_coercion_inside_arrays() -> None:
    tool = Tool("sum", "", {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"}}}})
    checked = check_arguments(tool, '{"xs": ["1", 2, "3"]}')
    assert checked.problem is None
    assert checked.repaired is True
    assert parsed(checked) == {"xs": [1, 2, 3]}


def test_union_type_number_or_boolean_coerces_boolean_text() -> None:
    tool = Tool("t", "", {"type": "object", "properties": {"x": {"type": ["number", "boolean"]}}})
    checked = check_arguments(tool, '{"x": "true"}')
    assert checked.problem is None
    assert parsed(checked) == {"x": True}


@pytest.mark.parametrize("raw", ["", "   ", "\n"])
def test_empty_arguments_are_an_empty_object(raw: str) -> None:
    tool = Tool("now", "", {"type": "object", "properties": {}})
    checked = check_arguments(tool, raw)
    assert checked == CheckedArguments("{}", None, False)


def test_empty_arguments_fail_when_a_property_is_required() -> None:
    checked = check_arguments(WEATHER, "")
    assert checked.arguments == "{}"
    assert checked.problem is not None
    assert "city" in checked.problem


def test_tool_without_parameters_takes_any_object() -> None:
    checked = check_arguments(Tool("t", "", {}), '{"anything": [1, 2]}')
    assert checked.problem is None
    assert parsed(checked) == {"anything": [1, 2]}


# --------------------------------------------------------------------------- check_arguments: problems


def test_missing_required_property_is_named() -> None:
    checked = check_arguments(WEATHER, '{"days": 2}')
    assert checked.problem is not None
    assert "city" in checked.problem
    assert parsed(checked) == {"days": 2}


def test_wrong_type_names_the_property() -> None:
    checked = check_arguments(WEATHER, '{"city": "Paris", "days": [1]}')
    assert checked.problem is not None
    assert checked.problem.startswith("days:")


def test_unknown_tool() -> None:
    checked = check_arguments(None, '{"city": "Paris"}')
    assert checked.arguments is None
    assert checked.problem is not None
    assert "not offered" in checked.problem


@pytest.mark.parametrize("raw", ["[1, 2]", "5", '"just text"', "null", "true", "garbage, not json", "{]", json.dumps(json.dumps([1]))])
def test_non_object_arguments(raw: str) -> None:
    checked = check_arguments(WEATHER, raw)
    assert checked.arguments is None
    assert checked.problem is not None
    assert "not a JSON object" in checked.problem


@pytest.mark.parametrize(
    "schema",
    [
        {"type": 5},
        {"type": "object", "properties": {"city": {"type": "no-such-type"}}},
        {"type": "object", "required": "city"},
        {"type": "object", "properties": {"city": {"type": "string", "pattern": "("}}},
        {"type": "object", "properties": {"city": {"$ref": "#/$defs/missing"}}},
    ],
)
def test_broken_schema_is_a_problem_not_an_exception(schema: dict[str, Any]) -> None:
    checked = check_arguments(Tool("t", "", schema), '{"city": "Paris"}')
    assert checked.problem is not None
    assert "schema" in checked.problem.lower()
    assert parsed(checked) == {"city": "Paris"}


# --------------------------------------------------------------------------- property: never raises

_JSONISH = st.text(alphabet="{}[]\"':, \n0123456789.-eEtrufalsnTFNone\\abc", max_size=60)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def _damaged_json(draw: st.DrawFn) -> str:
    text = json.dumps(draw(st.dictionaries(st.sampled_from(["city", "days", "threshold", "metric", "x"]), _VALUES, max_size=5)))
    cut = draw(st.integers(0, len(text)))
    return text[:cut] + draw(st.sampled_from(["", ",", "'", '"', "}", "]", ",}", "True", "None"]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.one_of(st.text(max_size=200), _JSONISH, _damaged_json()), known=st.booleans())
def test_check_arguments_never_raises(raw: str, known: bool) -> None:
    checked = check_arguments(WEATHER if known else None, raw)
    assert isinstance(checked, CheckedArguments)
    if checked.problem is None:
        # accepted: canonical JSON of an object that has the required property
        assert checked.arguments is not None
        value = json.loads(checked.arguments)
        assert isinstance(value, dict)
        assert "city" in value
    if checked.arguments is None:
        assert checked.problem is not None
