"""Intervals and paired tests for per-user metrics, over users and seeds.

Inputs are per-user metric values (``gti.evaluate.rankings.per_user_metrics``): a
``(n_users,)`` vector for one run, or ``(n_seeds, n_users)`` for one arm over seeds,
always the same users in the same order.

Intervals: percentile bootstrap, seeded (``numpy.random.default_rng(seed)``), 10,000
resamples unless told otherwise. Over seeds and users together the resampling is the
two-way ("pigeonhole", Owen 2007) bootstrap: users and seeds are *crossed* factors
(every seed of an arm ranks the same users), so each resample draws ``n_seeds``
seeds and ``n_users`` users independently, with replacement, and takes the mean of
the selected cells. With one seed it is the ordinary bootstrap over users. It is
chosen over a nested bootstrap (users within seeds) because the user effect (an easy
user is easy for every seed) is shared across seeds, which nesting would ignore, and
over per-seed intervals combined afterwards because with 3 seeds there is no stable
way to pool them. With 3 seeds the seed factor is resampled from 3 values only: its
contribution to the width is itself uncertain (a known limit at this seed count).

Paired differences (arm A - arm B) use the cell differences ``d[s, u] = A[s, u] -
B[s, u]``, seed ``s`` of A paired with seed ``s`` of B: both fine-tune on the same
seeded example order and are evaluated on the same users, so the pairing removes the
user effect and the data-order effect. The interval is the two-way bootstrap of
``d``. The test is a paired sign-flip permutation test over users of the
seed-averaged differences ``dbar[u] = mean_s d[s, u]`` (null: for every user the two
arms' labels are exchangeable, so each ``dbar[u]`` is symmetric around 0). It is
exact (all ``2^m`` sign patterns of the ``m`` non-zero differences) when that is at
most ``n_resamples``, else Monte Carlo with ``p = (1 + #{|T*| >= |T|}) / (1 + R)``.
Averaging over seeds before testing treats users as the units of replication; the
seed-to-seed variance enters through the interval, not the test.
The relative gain ``mean(A) / mean(B) - 1`` (:func:`relative_gain`, a paper's "+26%")
takes the same resamples for both arms and the percentile interval of the ratio.

Shares of 0/1 outcomes over one set of units (``gti probe``'s exact match per held-out
item) get the Wilson score interval (:func:`wilson`): exact in form, no resampling, and
unlike the percentile bootstrap not a zero-width interval at 0 or 1 hits.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np

from gti.evaluate.rankings import RANKING_KS, Rankings, per_user_metrics

DEFAULT_RESAMPLES = 10_000
DEFAULT_LEVEL = 0.95
_CHUNK = 500  # resamples per block: bounds the (chunk, n_users) weight matrix


@dataclass(frozen=True)
class Interval:
    estimate: float  # mean over seeds and users
    low: float
    high: float
    level: float
    n_resamples: int
    n_seeds: int
    n_users: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class PairedTest:
    difference: Interval  # A - B with its interval
    p_value: float  # two-sided, sign-flip over users of the seed-averaged differences
    exact: bool  # all sign patterns enumerated (else Monte Carlo)
    n_permutations: int  # patterns evaluated
    wins: int  # users with dbar > 0
    losses: int  # users with dbar < 0
    per_seed: list[float]  # A - B per seed (means over users)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["difference"] = self.difference.to_dict()
        return d


@dataclass(frozen=True)
class Share:
    """``hits`` of ``n`` with its Wilson score interval."""

    hits: int
    n: int
    estimate: float  # hits / n
    low: float
    high: float
    level: float
    method: str = "wilson"

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def wilson(hits: int, n: int, *, level: float = DEFAULT_LEVEL) -> Share:
    """The Wilson score interval of a binomial share ``hits / n`` (Wilson 1927), the
    interval ``scipy.stats.binomtest(hits, n).proportion_ci(method="wilson")`` gives."""
    from scipy.stats import norm

    if n < 1 or not 0 <= hits <= n:
        raise ValueError(f"need 0 <= hits <= n and n >= 1, got {hits} of {n}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    z = float(norm.ppf(0.5 + level / 2))
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # At 0 or n hits the bound is 0 or 1 exactly (centre = half there); keep rounding out.
    low = 0.0 if hits == 0 else max(0.0, centre - half)
    high = 1.0 if hits == n else min(1.0, centre + half)
    return Share(hits, n, p, float(low), float(high), level)


def _as_cells(x: np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"expected (n_users,) or (n_seeds, n_users) values, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("per-user values hold NaN or Inf")
    return a


def bootstrap_means(x: np.ndarray, *, n_resamples: int, seed: int) -> np.ndarray:
    """(n_resamples,) two-way bootstrap replicates of the mean of ``x`` (S, n).

    Replicate b draws seed indices s_1..s_S and user indices u_1..u_n with
    replacement and returns mean_j mean_i x[s_j, u_i]. The user draw is applied as
    multiplicity weights, so a block costs one (S, n) @ (n, chunk) product.
    """
    x = _as_cells(x)
    n_seeds, n_users = x.shape
    rng = np.random.default_rng(seed)
    out = np.empty(n_resamples)
    for start in range(0, n_resamples, _CHUNK):
        m = min(_CHUNK, n_resamples - start)
        users = rng.integers(0, n_users, size=(m, n_users))  # (m, n)
        seeds = rng.integers(0, n_seeds, size=(m, n_seeds))  # (m, S)
        weights = np.zeros((m, n_users))
        np.add.at(weights, (np.arange(m)[:, None], users), 1.0 / n_users)
        per_seed = x @ weights.T  # (S, m): user-resampled mean of each seed
        out[start : start + m] = per_seed[seeds, np.arange(m)[:, None]].mean(axis=1)
    return out


def _check_level(level: float, n_resamples: int) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")


def _percentile_interval(
    estimate: float, reps: np.ndarray, level: float, shape: tuple[int, int]
) -> Interval:
    """``estimate`` with the percentile interval of its bootstrap replicates ``reps``."""
    alpha = (1 - level) / 2
    low, high = np.percentile(reps, [100 * alpha, 100 * (1 - alpha)])
    return Interval(
        estimate=float(estimate),
        low=float(low),
        high=float(high),
        level=level,
        n_resamples=len(reps),
        n_seeds=shape[0],
        n_users=shape[1],
    )


def _paired_cells(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = _as_cells(a), _as_cells(b)
    if a.shape != b.shape:
        raise ValueError(f"paired arms need the same (seeds, users) shape: {a.shape} vs {b.shape}")
    return a, b


def interval(
    x: np.ndarray,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> Interval:
    """Mean of ``x`` ((n_users,) or (n_seeds, n_users)) with its percentile interval."""
    x = _as_cells(x)
    _check_level(level, n_resamples)
    reps = bootstrap_means(x, n_resamples=n_resamples, seed=seed)
    return _percentile_interval(x.mean(), reps, level, x.shape)


def sign_flip_p(
    d: np.ndarray, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> tuple[float, bool, int]:
    """Two-sided paired sign-flip p-value of mean(d) = 0 for per-user differences ``d``.

    Returns (p, exact, patterns evaluated). Zeros carry no sign and are kept as zeros.
    """
    d = np.asarray(d, dtype=np.float64).ravel()
    observed = abs(d.mean())
    nz = d[d != 0]
    m = len(nz)
    if m == 0:
        return 1.0, True, 1
    # Compare with a relative slack: the same sum computed in another order may
    # differ in the last bits, and ties must count as "as extreme".
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))
    n = len(d)
    if 2**m <= n_resamples:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=m)))  # (2^m, m)
        stats = np.abs(signs @ nz) / n
        return float(np.mean(stats >= observed - tol / n)), True, len(signs)
    rng = np.random.default_rng(seed)
    extreme = 0
    for start in range(0, n_resamples, _CHUNK):
        k = min(_CHUNK, n_resamples - start)
        signs = rng.choice((-1.0, 1.0), size=(k, m))
        extreme += int(np.sum(np.abs(signs @ nz) / n >= observed - tol / n))
    return (1 + extreme) / (1 + n_resamples), False, n_resamples


def paired_test(
    a: np.ndarray,
    b: np.ndarray,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> PairedTest:
    """Arm A - arm B on the same users (and seeds): interval and paired test."""
    a, b = _paired_cells(a, b)
    d = a - b
    dbar = d.mean(axis=0)  # (n,)
    p, exact, n_perm = sign_flip_p(dbar, n_resamples=n_resamples, seed=seed)
    return PairedTest(
        difference=interval(d, n_resamples=n_resamples, level=level, seed=seed),
        p_value=p,
        exact=exact,
        n_permutations=n_perm,
        wins=int((dbar > 0).sum()),
        losses=int((dbar < 0).sum()),
        per_seed=[float(v) for v in d.mean(axis=1)],
    )


def relative_gain(
    a: np.ndarray,
    b: np.ndarray,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> Interval | None:
    """mean(A) / mean(B) - 1 on the same users and seeds, with its percentile interval.

    A paper's "+26%" is this figure. Each replicate draws one set of seeds and users
    (:func:`bootstrap_means`) and applies it to both arms, so the pairing of the
    difference carries over to the ratio. None where B's mean is not positive, in the
    sample or in some replicate: the ratio is undefined there.
    """
    a, b = _paired_cells(a, b)
    _check_level(level, n_resamples)
    # One generator seed and equal shapes: both calls draw the same indices.
    ra = bootstrap_means(a, n_resamples=n_resamples, seed=seed)
    rb = bootstrap_means(b, n_resamples=n_resamples, seed=seed)
    if b.mean() <= 0 or (rb <= 0).any():
        return None
    return _percentile_interval(a.mean() / b.mean() - 1, ra / rb - 1, level, a.shape)


def summarize_rankings(
    r: Rankings,
    ks: tuple[int, ...] = RANKING_KS,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> dict[str, object]:
    """Every metric of one rankings file with its interval (strict-JSON dict)."""
    values = per_user_metrics(r, ks)
    metrics = {
        name: interval(v, n_resamples=n_resamples, level=level, seed=seed).to_dict()
        for name, v in values.items()
    }
    return {"n_users": len(r.users), "metrics": metrics}
