"""The shared harness of the benchmarks and evaluations in ``benchmarks/``: what more than one of
them uses, one concept a module.  The benchmarks themselves are thin entry points
(``python -m benchmarks.NAME``) that import shared code only from here (and from
``scripts.make_fixtures``), never from one another.

* :mod:`~benchmarks.common.machine`: the machine a run measured (its description, CPU steal);
* :mod:`~benchmarks.common.stats`: percentiles, precision and recall;
* :mod:`~benchmarks.common.report`: writing a JSON report;
* :mod:`~benchmarks.common.serve`: ``voiceagent serve`` in a child process;
* :mod:`~benchmarks.common.metrics`: a server's Prometheus ``/metrics``, read;
* :mod:`~benchmarks.common.sampler`: sampling during a run (a periodic thread; the CPU time and
  memory of processes);
* :mod:`~benchmarks.common.sessions`: spoken sessions (the fixtures' questions at real-time pace),
  made into files and played to a server at once;
* :mod:`~benchmarks.common.prompts`: what the LLM is given: long instructions, the evals' tools;
* :mod:`~benchmarks.common.inprocess`: the real server in this process on the benchmark fixtures,
  file by file (the quick subset, the reset between runs);
* the spoken evals' harness: :mod:`~benchmarks.common.questions` (the question files),
  :mod:`~benchmarks.common.speech` (voices, synthesized speech), :mod:`~benchmarks.common.conversations`
  (questions packed into conversations), :mod:`~benchmarks.common.scoring` (WER, answer matching,
  speakability, the judge) and :mod:`~benchmarks.common.stt` (STT without a server: configurations,
  clips padded and cut as the server cuts them).
"""
