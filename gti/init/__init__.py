"""Initialization of the new SID rows: ``gti init``.

``REGISTRY`` maps a strategy name to a function of one keyword-only signature
(:class:`gti.init.context.InitFn`): ``fn(*, old, n_new, generator, context) ->
(n_new, d)``. It is applied to the input embedding and, when the head is untied,
separately to the output head.

``gti`` (grounding) is not in the registry: it is a training stage that needs the
whole model, and it starts from one of these rows (``--start-from``, default
``mean`` as in the paper). ``gti.init.config.STRATEGIES`` lists all five names.
"""

from __future__ import annotations

from gti.init.context import InitContext, InitFn, Registry
from gti.init.description import description_mean_init
from gti.init.mean import mean_init, mean_noise_init
from gti.init.random_init import random_init

REGISTRY: Registry = {
    "mean": mean_init,
    "mean-noise": mean_noise_init,
    "random": random_init,
    "description-mean": description_mean_init,
}

__all__ = ["REGISTRY", "InitContext", "InitFn"]
