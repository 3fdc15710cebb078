"""Supervised fine-tuning for next-item generation: ``gti sft``.

A user's history as SID strings in, the next item's SID tokens out, loss on the
answer only (:mod:`gti.prompts`, :mod:`gti.sft.data`); optionally mixed with
LC-Rec's alignment tasks. :func:`gti.sft.run.run_sft` is the library entry;
training runs unchanged on one process or under ``accelerate launch``/``torchrun``.
"""
