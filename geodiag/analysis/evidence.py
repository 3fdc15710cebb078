"""What each per-row finding rests on, and the words that match it.

Three kinds of evidence (docs/findings.md, "Evidence, and what the gate does with it"):

- **proof**: the rows equal something: each other (an identical group), zero, the exact
  vocabulary mean (a mean init, transformers' ``mean_resizing``), the base's padding row bit
  for bit. Within the identical-row tolerance; no statistics.
- **measured**: a movement since a reference, a number (``barely_moved``: less than a
  fraction of what training moved the original rows).
- **statistical**: a test or a ranking suggests it: the new rows' norms are distributed like
  the unused padding rows' (KS test), they rank with the rows the files mark unused (Land &
  Bartolo's indicator: a candidate that magikarp verifies by prompting), they look like an
  initializer's isotropic draw (not rejecting isotropy is no proof of a draw).

The gate fails on proof and measured movement. A statistical rule fails only where its
false-FAIL rate is measured low on the rows users check (new rows after short and long
training, structured inits: the table of docs/findings.md, ``tools/findings_table.py``);
:data:`STATISTICS_THAT_FAIL` lists those, none so far. The others warn and name the flag
that settles them (:data:`SETTLED_BY`).

The words follow the evidence: "never left their init" only where the rows equal it (within
the identical-row tolerance), "barely moved (by at most X since REF)" where a movement was
measured, "look like" where a statistic suggests.
"""

from __future__ import annotations

PROOF, MEASURED, STATISTICAL = "proof", "measured", "statistical"

# The evidence of each per-row finding that makes a row untrained (or suspected), by the
# keys of geodiag.analysis.findings.FINDINGS.
EVIDENCE = {
    "identical": PROOF,
    "vocabulary_mean": PROOF,
    "zero": PROOF,
    "unchanged_padding": PROOF,
    "barely_moved": MEASURED,
    "like_padding": STATISTICAL,
    "under_trained": STATISTICAL,
    "initializer_draw": STATISTICAL,
}
# The statistical rules whose false-FAIL rate on new rows after short and long training and
# on structured inits is measured low (docs/findings.md, the false-FAIL table): they fail
# like proof. None is: the LLaMA-Factory noise_init rows a short full fine-tune moved rank
# with the unused rows and look like a noise draw, and a pretrained file's own added tokens
# rank with its unused rows.
STATISTICS_THAT_FAIL: tuple[str, ...] = ()
# The findings that count against the gate, and those that only warn.
COUNTED = tuple(k for k, e in EVIDENCE.items() if e != STATISTICAL or k in STATISTICS_THAT_FAIL)
SUSPECTED = tuple(k for k in EVIDENCE if k not in COUNTED)

# The flag that settles each statistical finding: a before to measure the rows from.
SETTLED_BY = {
    "like_padding": "--base BASE compares each row with the base's",
    "under_trained": "--reference INIT or --base BASE measures each row from a before",
    "initializer_draw": "--reference INIT (the checkpoint they started from) measures "
    "each row's movement",
}


def _moved(u, kind: str) -> float | None:
    return (u.moved_at_most or {}).get(kind)


def _since(u) -> str:
    """What the movement is measured from, as the words say it."""
    if u.movement_basis == "reference":
        ref = u.movement.reference if u.movement is not None else None
        return f"the reference{f': {ref}' if ref else ''}"
    return "the vocabulary mean"


def _identical(u) -> str:
    if not u.n_groups:
        return ""
    far, tol = _moved(u, "identical"), u.tolerance
    group = f"{u.n_groups} group(s) of rows identical within {tol:.2g}"
    if u.movement_basis == "reference" and far is not None and far > tol:  # moved, together
        group += f" (they moved together, by at most {far:.3g} since {_since(u)})"
    return group


def _vocabulary_mean(u) -> str:
    g = u.at_vocabulary_mean
    if not g:
        return ""
    return (
        f"{g.size} at the vocabulary mean (within {u.tolerance:.2g}): a mean init they never left"
    )


def _zero(u) -> str:
    return f"{u.zero.size} all zero" if u.zero else ""


def _unchanged_padding(u) -> str:
    g = u.unchanged_padding
    return f"{g.size} the base's padding rows, bit for bit unchanged" if g else ""


def _barely_moved(u) -> str:
    if not u.barely_moved:
        return ""
    unmoved = u.unmoved.size if u.unmoved else 0
    moved = u.barely_moved.size - unmoved
    ref = f"the reference{f': {u.movement.reference}' if u.movement.reference else ''}"
    out = [f"{unmoved} never left {ref} (within {u.tolerance:.2g})"] if unmoved else []
    if moved:
        most = _moved(u, "barely_moved")
        by = f"by at most {most:.3g}, " if most is not None else ""
        out.append(f"{moved} barely moved ({by}under {u.movement.threshold:.3g}) since {ref}")
    return "; ".join(out)


def _like_padding(u) -> str:
    if not (u.like_padding and u.padding):
        return ""
    return (
        f"{u.like_padding.size} look like the {u.padding.n_padding} unused padding rows past "
        f"the tokenizer (their norms: KS p = {u.padding.p_new_vs_padding:.2g}, which does not "
        "reject it)"
    )


def _under_trained(u) -> str:
    if not (u.under_trained and u.indicator):
        return ""
    ind = u.indicator
    return (
        f"{u.under_trained.size} rank with the {ind.n_unused} rows the files mark unused "
        f"({ind.indicator} past {ind.cut:.3g}, Land & Bartolo's under-trained indicator: a "
        "candidate, which magikarp verifies by prompting the model)"
    )


def _initializer_draw(u) -> str:
    if not (u.initializer_draw and u.draw):
        return ""
    where = {
        "initializer": "at the model's initializer's scale",
        "noise": "around the vocabulary mean",
    }
    return (
        f"{u.initializer_draw.size} look isotropic {where.get(u.draw.kind or '', '')}, as an "
        f"untrained draw would (isotropy not rejected: p = {u.draw.p_isotropic:.2g}; rows a "
        "short training moved can look so too)"
    )


# Each finding's words, by the keys of EVIDENCE.
_WORDS = {
    "identical": _identical,
    "vocabulary_mean": _vocabulary_mean,
    "zero": _zero,
    "unchanged_padding": _unchanged_padding,
    "barely_moved": _barely_moved,
    "like_padding": _like_padding,
    "under_trained": _under_trained,
    "initializer_draw": _initializer_draw,
}


def counted_kinds(u) -> list[str]:
    """How the counted untrained rows of ``u`` (an UntrainedRows) were found, each in the
    words its evidence allows."""
    return [w for w in (_WORDS[k](u) for k in COUNTED) if w]


def suspected_kinds(u) -> list[str]:
    """What the statistics suggest of the suspected rows, in "look like" words."""
    return [w for w in (_WORDS[k](u) for k in SUSPECTED) if w]


def at_init(u) -> bool:
    """Whether every counted untrained row of ``u`` equals its init within the tolerance:
    at the vocabulary mean, the base's padding row unchanged, the reference's row, or in an
    identical group that never left the vocabulary mean or the reference."""
    n = u.n_untrained
    if not n or u._at_init is None or u._untrained is None:
        return False
    return bool(u._at_init[u._untrained].all())


def untrained_head(u, n_new: int, noun: str = "rows") -> str:
    """ "k of n new rows never left their init" where they all equal it, else "k of n new
    rows are untrained"."""
    verb = "never left their init" if at_init(u) else "are untrained"
    return f"{u.n_untrained} of {n_new} new {noun} {verb}"


def suspicion(u, n_new: int) -> str:
    """The warning of the suspected rows: what the statistics suggest, and what settles it;
    "" when none."""
    if not u.suspected:
        return ""
    kinds = [k for k in SUSPECTED if _WORDS[k](u)]
    settle = "; ".join(dict.fromkeys(SETTLED_BY[k] for k in kinds))
    own = ""
    if u.own_tokens:
        own = (
            "; the new tokens here are the tokenizer's added tokens, which a pretrained file "
            "ships of its own (nobody need have added them): `geodiag scan FILE` ranks every "
            "row of it by the indicator, and --new-tokens or a sidecar names the ones you added"
        )
    return (
        f"{u.suspected.size} of {n_new} new rows look untrained by statistics alone, not "
        f"counted ({'; '.join(suspected_kinds(u))}): {u.suspected.listed(counted=True)}{own}; "
        f"{settle}"
    )
