"""The categories of hostile message, on each route: what the report counts them by."""

from __future__ import annotations

REALTIME_CATEGORIES = (
    "malformed_json",
    "truncated_json",
    "not_an_object",
    "wrong_type",
    "missing_field",
    "unknown_type",
    "huge_number",
    "lone_surrogate",
    "deep_nesting",
    "binary_frame",
    "bad_value",
    "out_of_order",
)
TWILIO_CATEGORIES = (*REALTIME_CATEGORIES[:10], "out_of_order")
