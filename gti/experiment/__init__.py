"""The experiment runner: ``gti experiment CONFIG.toml``.

Builds the SIDs once, runs every arm (:mod:`gti.experiment.arms`) of every seed
through init -> SFT -> evaluation, then writes the results table and a geodiag
report comparing the arms at both stages (:mod:`gti.experiment.runner`).
Presets live in ``configs/*.toml``.
"""
