"""Protocol fuzzer: hostile clients against a live server over loopback, a good session beside them.

The entry point, ``python -m benchmarks.fuzz``; the package's docstring
(``benchmarks/fuzz/__init__.py``) describes the scenarios, the invariants and the report, and
``run.py`` holds the run and the command line.

    .venv/bin/python -m benchmarks.fuzz                       # 10,000 messages, a server of its own
    .venv/bin/python -m benchmarks.fuzz --messages 600 --url ws://127.0.0.1:8765
"""

from __future__ import annotations

from benchmarks.fuzz.run import main

if __name__ == "__main__":
    raise SystemExit(main())
