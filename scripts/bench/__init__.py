"""The shared harness of the benchmarks and evaluations in ``scripts/``: what more than one of
them uses, one concept a module.  The scripts themselves are thin entry points
(``python -m scripts.NAME``) that import shared code only from here (and from
``scripts.make_fixtures`` and ``scripts.fuzz``), never from one another.

* :mod:`~scripts.bench.machine`: the machine a run measured (its description, CPU steal);
* :mod:`~scripts.bench.stats`: percentiles, precision and recall;
* :mod:`~scripts.bench.report`: writing a JSON report;
* :mod:`~scripts.bench.serve`: ``voiceagent serve`` in a child process;
* :mod:`~scripts.bench.metrics`: a server's Prometheus ``/metrics``, read;
* :mod:`~scripts.bench.sampler`: sampling during a run (a periodic thread; the CPU time and
  memory of processes);
* :mod:`~scripts.bench.sessions`: spoken sessions (the fixtures' questions at real-time pace),
  made into files and played to a server at once;
* :mod:`~scripts.bench.prompts`: what the LLM is given: long instructions, the evals' tools;
* :mod:`~scripts.bench.inprocess`: the real server in this process on the benchmark fixtures,
  file by file (the quick subset, the reset between runs);
* the spoken evals' harness: :mod:`~scripts.bench.questions` (the question files),
  :mod:`~scripts.bench.speech` (voices, synthesized speech), :mod:`~scripts.bench.conversations`
  (questions packed into conversations), :mod:`~scripts.bench.scoring` (WER, answer matching,
  speakability, the judge) and :mod:`~scripts.bench.stt` (STT without a server: configurations,
  clips padded and cut as the server cuts them).
"""
