"""Benchmarks, evaluations and developer tools; each module also runs as ``python scripts/NAME.py``.

They import each other as ``scripts.NAME``: the project's editable install puts the checkout on
the import path, so no script edits ``sys.path``."""
