"""Judging: report dataclasses -> pass / warn / fail, and the cause and remedy in words.

- ``checks/``: one module per check (its threshold, value, reading, sentence and diagnosis:
  ``checks/unit.py``) and the registry that lists them and builds ``GateConfig``,
  ``CheckName`` and the gate (``checks/__init__.py``);
- ``advice``: the words of a diagnosis (cause, remedy, the grounding fallback);
- ``verdict``: the cause and remedy of each matrix, in one sentence;
- ``trajectory``: the checks' values over training: the callback's
  ``geodiag_trajectory.jsonl`` and checkpoint series.

Imports ``analysis`` (its dataclasses), never ``outputs`` (which prints what it judges).
"""
