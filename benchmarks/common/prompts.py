"""What the benchmarks and evals give the LLM: a conference assistant's long instructions
(long_prompt.py, engine_turns.py, attention.py, soak.py, eval_long_conversation.py,
eval_call_check.py), and the tools the evals offer (eval_tools.py, eval_stt.py's ``+tools`` prompt)."""

from __future__ import annotations

from voiceagent.tools.builtin import builtin_tools
from voiceagent.tools.spec import Tool

__all__ = ["TOOLS", "instructions"]

FIRST = ["Ada", "Bruno", "Chidi", "Dana", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemal", "Lena", "Mateo", "Nia"]
LAST = ["Okafor", "Lindqvist", "Moreau", "Tanaka", "Silva", "Novak", "Haddad", "Kowalski", "Brennan", "Castillo", "Weber"]
TOPICS = [
    "battery recycling",
    "coastal erosion",
    "speech codecs",
    "urban beekeeping",
    "compiler testing",
    "solar forecasting",
    "bridge inspection drones",
    "sleep and memory",
    "soil carbon",
    "protein folding",
    "rail signalling",
    "tea fermentation",
]
ROOMS = ["Amber", "Birch", "Cedar", "Delta", "Ember", "Fjord", "Garnet", "Harbor", "Indigo", "Juniper"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


def instructions(chars: int) -> str:
    """A conference assistant's system prompt of about ``chars`` characters: a few lines of
    facts, then a schedule of talks until ``chars`` is reached (the line that reaches it is the
    last).  The same ``chars`` gives the same text."""
    lines = [
        "You are the voice assistant of the Northwind conference. Answer in one short spoken sentence, from this information only.",
        "The keynote is on Monday at 9:00 in the Great Hall. Lunch is served at noon in the Atrium. Coffee is in the foyer all day.",
        "Lost badges: ask at the registration desk by the main entrance. The Wi-Fi is free; the network is Northwind-Guest.",
    ]
    n = 0
    while sum(len(x) + 1 for x in lines) < chars:
        day, hour = DAYS[n % len(DAYS)], 9 + (n // len(DAYS)) % 9
        who = f"{FIRST[n % len(FIRST)]} {LAST[(n * 7) % len(LAST)]}"
        topic = TOPICS[(n * 5) % len(TOPICS)]
        room = ROOMS[(n * 3) % len(ROOMS)]
        lines.append(
            f"Talk {n + 1}: {day} at {hour}:{(n % 2) * 30:02d} in room {room}, {who} on {topic}. "
            f"{who.split()[0]} will show recent field results on {topic}, then take questions for ten minutes; "
            f"slides are shared after the session."
        )
        n += 1
    return "\n".join(lines)


WEATHER = Tool(
    "get_weather",
    "Get the current weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}}, "required": ["city"]},
)
EMAIL = Tool(
    "send_email",
    "Send an email.",
    {
        "type": "object",
        "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "subject"],
    },
)
TOOLS = (WEATHER, EMAIL, *builtin_tools())
"""The tools eval_tools.py offers in every case: two of an app's own, then the built-in ones."""
