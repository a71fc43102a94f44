"""Benchmarks, evaluations and developer tools; each module runs as ``python -m scripts.NAME``
(or ``python scripts/NAME.py``).

The scripts are entry points: what more than one of them uses lives in :mod:`scripts.bench`, and
a script imports shared code only from there (and from ``scripts.make_fixtures`` and
``scripts.fuzz``), never from another script.  They import it as ``scripts.bench.NAME``: the
project's editable install puts the checkout on the import path, so no script edits ``sys.path``."""
