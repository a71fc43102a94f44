#!/usr/bin/env python3
"""Protocol fuzzer: hostile clients against a live server over loopback, a good session beside them.

The entry point; the fuzzer is the package ``scripts/fuzz/``, whose docstring
(``scripts/fuzz/__init__.py``) describes the scenarios, the invariants and the report, and whose
``run.py`` holds the run and the command line.

    .venv/bin/python scripts/fuzz_server.py                       # 10,000 messages, a server of its own
    .venv/bin/python scripts/fuzz_server.py --messages 600 --url ws://127.0.0.1:8765
"""

from __future__ import annotations

from scripts.fuzz.run import main, run

__all__ = ["main", "run"]

if __name__ == "__main__":
    raise SystemExit(main())
