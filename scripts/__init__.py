"""Set-up and test scripts: ``setup.sh``, ``setup_vllm.sh``, ``test.sh``, and the Python tools they
and the tests use, each run as ``python -m scripts.NAME``: ``make_fixtures`` (the spoken fixtures)
and ``gpu_probe`` (which stages run faster on CUDA).

The benchmarks and evaluations are the package :mod:`benchmarks` (``python -m benchmarks`` lists
them).  The project's editable install puts the checkout on the import path, so no script edits
``sys.path``."""
