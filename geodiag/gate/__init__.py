"""Judging: report dataclasses -> pass / warn / fail, and the words and pages for them.

- ``checks``: the table of checks (``GateConfig`` fields), each check's reading, the gate;
- ``verdict``: the cause and remedy in words;
- ``text``: the terminal tables of ``metrics``, ``check`` and ``drift``;
- ``outputs``: the CI pages: JUnit XML, the job summary (Markdown), workflow annotations.

Imports ``analysis`` (its dataclasses), never ``report``.
"""
