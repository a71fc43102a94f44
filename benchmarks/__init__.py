"""The benchmarks and evaluations a user or contributor runs: ``python -m benchmarks`` lists each
with what it measures and how long it takes (the index is :mod:`benchmarks.__main__`), and each
runs as ``python -m benchmarks.NAME`` (``--help`` for its options).

Every module here is an entry point: what more than one of them uses lives in
:mod:`benchmarks.common`, and a benchmark imports shared code only from there (and from
``scripts.make_fixtures``), never from another benchmark (``eval_call_check`` reads
``eval_long_conversation``'s turns and tools: the one exception, the two measure the same
conversation).  The protocol fuzzer is the package :mod:`benchmarks.fuzz`.  Data files (the
question sets, the interruption cases, the cache pairs) lie beside the module that reads them.
The project's editable install puts the checkout on the import path, so no module edits
``sys.path``; the set-up and test scripts stay in ``scripts/``."""
