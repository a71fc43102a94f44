"""A tool call's arguments, as a small model writes them: parse leniently, repair, check.

Small models get the JSON of a call nearly right: single quotes, a trailing comma, a missing
closing brace, ``True`` for ``true``, the arguments object wrapped in a string, ``"5"`` where the
schema wants ``5``.  :func:`check_arguments` repairs those, validates the result against the
tool's JSON Schema (``jsonschema``), and either returns canonical JSON text or says plainly what
is wrong.  It never raises on what a model wrote.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
from referencing.exceptions import Unresolvable

from voiceagent.tools.spec import Tool

__all__ = ["CheckedArguments", "check_arguments", "loads_lenient"]

_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def loads_lenient(text: str) -> Any | None:
    """``text`` as JSON, repaired where a model's usual slips make it invalid; None if hopeless.

    Tried in order: JSON as is; trailing commas dropped; missing closing brackets added; a
    Python literal (single quotes, ``True``/``None``) read safely with :func:`ast.literal_eval`.
    """
    text = text.strip()
    if not text:
        return None
    candidates = [text, _TRAILING_COMMA.sub(r"\1", text)]
    closed = _close_brackets(candidates[-1])
    if closed is not None:
        candidates.append(closed)
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            pass
    for candidate in candidates:
        try:
            value = _python_literal(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        try:
            json.dumps(value)  # only JSON's types: a set or a bytes literal is not an argument
        except (TypeError, ValueError):
            return None
        return value
    return None


_JSON_NAMES = {"true": True, "false": False, "null": None}


def _python_literal(text: str) -> Any:
    """``text`` read as a Python literal, with JSON's bare ``true``/``false``/``null`` taken as
    names (never inside strings, whose contents are the user's words)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an odd escape in a model's string is not our warning
        tree = ast.parse(text, mode="eval")

    class _Names(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in _JSON_NAMES:
                return ast.copy_location(ast.Constant(_JSON_NAMES[node.id]), node)
            return node

    return ast.literal_eval(_Names().visit(tree))


def _close_brackets(text: str) -> str | None:
    """``text`` with the brackets it left open closed (outside strings); None if it has none open
    or closes one it never opened."""
    stack: list[str] = []
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and (not stack or stack.pop() != ch):
            return None
    if not stack and not quote:
        return None
    return text + quote + "".join(reversed(stack))


@dataclass(frozen=True, slots=True)
class CheckedArguments:
    """``arguments``: canonical JSON of the object (set whenever it parsed); ``problem``: why it
    does not fit the tool (None: it does); ``repaired``: it parsed only after repair or coercion."""

    arguments: str | None
    problem: str | None
    repaired: bool = False


def check_arguments(tool: Tool | None, raw: str) -> CheckedArguments:
    """Repair and validate the arguments ``raw`` that the model wrote for ``tool``."""
    if tool is None:
        return CheckedArguments(None, "the model called a tool that is not offered")
    value = loads_lenient(raw) if raw.strip() else {}
    repaired = value is not None and _strict(raw) is None and bool(raw.strip())
    if isinstance(value, str):  # the object, wrapped in a string
        value = loads_lenient(value)
        repaired = True
    if not isinstance(value, dict):
        return CheckedArguments(None, f"arguments are not a JSON object: {raw[:200]!r}", repaired)
    schema = dict(tool.parameters) if tool.parameters else {"type": "object"}
    coerced = _coerce(value, schema)
    repaired = repaired or coerced != value
    text = json.dumps(coerced, ensure_ascii=False)
    try:
        jsonschema.validate(coerced, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
        return CheckedArguments(text, f"{where}: {exc.message}", repaired)
    except jsonschema.SchemaError as exc:
        # The client's schema is broken, not the model's call: say so, with the arguments.
        return CheckedArguments(text, f"the tool's parameters are not a valid JSON Schema: {exc.message}", repaired)
    except Unresolvable as exc:  # a $ref that points nowhere
        return CheckedArguments(text, f"the tool's parameters are not a valid JSON Schema: {exc}", repaired)
    return CheckedArguments(text, None, repaired)


def _strict(raw: str) -> Any | None:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _coerce(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` with scalar strings converted where the schema asks for a number or boolean."""
    kind = schema.get("type")
    if isinstance(value, dict) and isinstance(schema.get("properties"), Mapping):
        props: Mapping[str, Any] = schema["properties"]
        return {k: _coerce(v, props[k]) if isinstance(props.get(k), Mapping) else v for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_coerce(v, schema["items"]) for v in value]
    if isinstance(value, str):
        kinds: Sequence[Any] = kind if isinstance(kind, list) else [kind]
        stripped = value.strip()
        if "integer" in kinds and re.fullmatch(r"-?\d{1,18}", stripped):
            return int(stripped)
        if "number" in kinds:
            try:
                number = float(stripped)
            except ValueError:
                number = math.nan
            if math.isfinite(number):
                return number
        if "boolean" in kinds and stripped.lower() in ("true", "false"):
            return stripped.lower() == "true"
    return value
