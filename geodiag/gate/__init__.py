"""Judging: report dataclasses -> pass / warn / fail, and the cause and remedy in words.

- ``checks``: the table of checks (``GateConfig`` fields), each check's reading, the gate;
- ``verdict``: the cause and remedy in words.

Imports ``analysis`` (its dataclasses), never ``outputs`` (which prints what it judges).
"""
