"""``gti probe``: what a checkpoint's new rows say about their items, before any SFT.

``config`` holds the options, ``source`` finds the index, item texts and held-out items of
a checkpoint, ``baselines`` the answers of decoders that know no text, ``likelihood`` the
SID -> text direction, ``measure`` computes the figures, ``run`` loads and writes,
``text`` prints them, ``callback`` runs them inside a ``transformers.Trainer`` (at
evaluations and saves, on the model in memory).
"""
