"""Which checkpoints of a report are a before and an after, and why.

Checkpoints given side by side are arms to compare unless something says otherwise: the
order they were given in pairs nothing. A checkpoint's before, first that applies:

1. ``--pair BEFORE=AFTER``, the user's (both given as checkpoints; the same new tokens,
   else an error);
2. the before its files carry, when it is one of the checkpoints given: the init
   checkpoint its sidecar names, the run's earliest ``checkpoint-N`` (as
   :mod:`geodiag.io.vocabulary.references` finds it for ``check``);
3. the base model a PEFT adapter's ``adapter_config.json`` names, when it is given;
4. the earliest checkpoint given of the same run (Trainer ``checkpoint-N`` folders, or gti
   checkpoints of one strategy and stage with a step, as the trajectory groups them), when
   the run's earliest on disk is not given.

An automatic before must have the same new tokens (else a note, no pair). The after's
movement ("barely moved since") is measured from its before, unless the files gave it
another (4: the run's earliest on disk, which the report does not hold).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geodiag.errors import InputError
from geodiag.gate.trajectory import checkpoint_step
from geodiag.io.checkpoint import Checkpoint, open_checkpoint, with_reference
from geodiag.io.sources.options import ReadOptions
from geodiag.io.sources.remote import is_remote
from geodiag.io.vocabulary.references import OFF_HINT, same_vocab

PAIR_FLAG = "--pair"
HOW_TO_PAIR = f"pair two yourself with {PAIR_FLAG} BEFORE=AFTER (e.g. the init and its SFT)"


@dataclass
class Pair:
    """One before -> after pair of the report, by label, and why it is one."""

    before: str
    after: str
    why: str


@dataclass(frozen=True)
class Found:
    """A pair by index into the report's checkpoints; ``movement``: the after's movement
    is measured from the before."""

    before: int
    after: int
    why: str
    movement: bool


def where(ckpt: Checkpoint) -> str:
    """A checkpoint's identity for matching: its URL, else its resolved path."""
    if ckpt.remote and ckpt.location:
        return ckpt.location
    return str(Path(ckpt.path).resolve())


def with_references(ckpts: list[Checkpoint], read: ReadOptions) -> None:
    """Give each checkpoint the reference its files carry (:func:`with_reference`, as
    ``open_checkpoint`` would with ``read``), taken from ``ckpts`` when it is one of them:
    each checkpoint is opened once (they were opened without a reference)."""
    opened = {where(c): c for c in ckpts}

    def reuse(path, opts: ReadOptions, declared=None) -> Checkpoint:
        key = str(path) if is_remote(path) else str(Path(path).resolve())
        return opened.get(key) or open_checkpoint(path, opts, declared)

    for c in ckpts:
        with_reference(c, read, None, reuse)
        c.read = read


def _given(text: str, paths: list, ckpts: list[Checkpoint]) -> int | None:
    """The index of the checkpoint given as ``text`` (as typed, or the same place)."""
    for i, p in enumerate(paths):
        if str(p) == text:
            return i
    if is_remote(text):
        return next((i for i, c in enumerate(ckpts) if c.location == text), None)
    resolved = str(Path(text).resolve())
    return next((i for i, c in enumerate(ckpts) if where(c) == resolved), None)


def explicit_pairs(pairs: tuple[str, ...], paths: list, ckpts: list[Checkpoint]) -> list[Found]:
    """``--pair BEFORE=AFTER`` values as pairs; a side that is not a checkpoint given, a
    checkpoint paired with itself, two befores of one after or other new tokens: exit 2."""
    out: list[Found] = []
    for value in pairs:
        # split at the "=" whose sides are both checkpoints given (a URL may hold one)
        cuts = [k for k, ch in enumerate(value) if ch == "="]
        sides = [(value[:k], value[k + 1 :]) for k in cuts]
        found = [(_given(a, paths, ckpts), _given(b, paths, ckpts)) for a, b in sides]
        match = next(((a, b) for a, b in found if a is not None and b is not None), None)
        if match is None:
            if not cuts:
                raise InputError(PAIR_FLAG, f"{value!r}: give BEFORE=AFTER")
            a, b = sides[0]
            missing = a if found[0][0] is None else b
            raise InputError(
                PAIR_FLAG, f"{missing}: not one of the checkpoints given (give it as a CKPT too)"
            )
        a, b = match
        if a == b:
            raise InputError(PAIR_FLAG, f"{value}: a checkpoint paired with itself")
        if any(f.after == b for f in out):
            raise InputError(PAIR_FLAG, f"{paths[b]}: paired with two befores")
        same_vocab(ckpts[a], ckpts[b], PAIR_FLAG, f"{paths[a]} -> {paths[b]}")
        out.append(Found(a, b, f"{PAIR_FLAG} {value}", movement=True))
    return out


def _files_before(b: int, ckpts: list[Checkpoint], at: dict[str, int]) -> Found | None:
    """2: the reference the files carry, when it is one of the checkpoints given."""
    ref = ckpts[b].reference
    a = at.get(where(ref)) if ref is not None else None
    if a is None or a == b:
        return None
    note = next((n for n in ckpts[b].reference_notes if n.startswith("reference: ")), "")
    why = note.removeprefix("reference: ").replace(f" ({OFF_HINT})", "")
    return Found(a, b, why or "its reference", movement=True)


def _adapter_base(b: int, ckpts: list[Checkpoint], at: dict[str, int]) -> Found | None:
    """3: the base a PEFT adapter is read over, when it is one of the checkpoints given."""
    base = ckpts[b].adapter.get("base")
    if not base:
        return None
    a = at.get(base if is_remote(base) else str(Path(base).resolve()))
    if a is None or a == b:
        return None
    why = "the base model its adapter_config.json names (a PEFT adapter over its base)"
    return Found(a, b, why, movement=ckpts[b].reference is None)


def _run_earliest(b: int, paths: list, ckpts: list[Checkpoint], labels: list[str]):
    """4: the earliest checkpoint given of the same run, earlier than ``b``."""
    key = checkpoint_step(Path(paths[b]), _provenance(ckpts[b]))
    if key is None:
        return None
    earlier = []
    for a, (p, c) in enumerate(zip(paths, ckpts, strict=True)):
        k = checkpoint_step(Path(p), _provenance(c))
        if a != b and k is not None and k[0] == key[0] and k[1] < key[1]:
            earlier.append((k[1], a))
    if not earlier:
        return None
    _, a = min(earlier)
    why = f"{labels[a]}, the earliest checkpoint of the same run in this report"
    return Found(a, b, why, movement=ckpts[b].reference is None)


def _provenance(ckpt: Checkpoint) -> dict:
    return ckpt.provenance


def find_pairs(
    paths: list, ckpts: list[Checkpoint], labels: list[str], given: tuple[str, ...] = ()
) -> tuple[list[Found], list[str]]:
    """(the pairs, each after once, in the order of the afters; notes on befores passed over
    because their new tokens differ)."""
    explicit = {f.after: f for f in explicit_pairs(given, paths, ckpts)}
    at = {where(c): i for i, c in enumerate(ckpts)}
    pairs, notes = [], []
    for b in range(len(ckpts)):
        if b in explicit:
            pairs.append(explicit[b])
            continue
        candidates = (
            _files_before(b, ckpts, at),
            _adapter_base(b, ckpts, at),
            _run_earliest(b, paths, ckpts, labels),
        )
        for found in candidates:
            if found is None:
                continue
            try:
                same_vocab(ckpts[found.before], ckpts[b], paths[b], "")
            except InputError:
                notes.append(
                    f"{labels[found.before]} -> {labels[b]} not paired ({found.why}): "
                    "their new tokens differ"
                )
                continue
            pairs.append(found)
            break
    return pairs, notes


def no_pairs_note(n_checkpoints: int) -> str:
    """Why a report of several checkpoints made no pair, and how to make one."""
    return (
        f"No pairs: none of the {n_checkpoints} checkpoints is another's before by its files "
        "(a sidecar's init checkpoint, an earlier checkpoint-N of the same run, a PEFT "
        f"adapter's base), so they are compared side by side only; {HOW_TO_PAIR}."
    )


def labelled(pairs: list[Found], labels: list[str]) -> list[Pair]:
    return [Pair(labels[f.before], labels[f.after], f.why) for f in pairs]
