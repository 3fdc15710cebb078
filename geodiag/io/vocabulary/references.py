"""The before a checkpoint's new rows are measured from: ``--reference``, else each one
the files carry.

"Untrained" needs a before: a new row that barely moved since it never trained
(:func:`geodiag.metrics.untrained.barely_moved`). The first that applies wins:

1. ``--reference CKPT``: the user's; a missing or mismatched one is an error (exit 2);
2. the init checkpoint the sidecar names (provenance ``init_checkpoint``, written by
   ``gti sft``, relative to the checkpoint's folder), when it is there;
3. PEFT's ``original_module`` beside a ``modules_to_save`` copy, in a PEFT model's full
   state dict (``model.state_dict()`` saved, or accelerate's ``save_model``): the module
   before training, in the same file. An adapter folder's before
   (:func:`geodiag.io.formats.peft_adapter.before`): the ``original_module`` its
   ``save_pretrained`` stores beside the copy when the embedding was resized (PEFT 0.17
   and later), else the base's tensor; under trainable tokens or LoRA, the rows without
   them;
4. the earliest sibling of a Trainer ``checkpoint-N`` folder (``checkpoint-M``, M < N,
   in the same output folder): after M steps, not the initialization.

Each automatic one must have the same new tokens (ids and strings); one that is missing,
unreadable or mismatched is a note and the next is tried, never an error.
``--no-auto-reference`` keeps to ``--reference`` alone. This module only names them
(:func:`candidates`); the caller opens each, as the checkpoint was opened
(:func:`geodiag.io.checkpoint.with_reference`). Opening one reads headers only: the
movement reads its new rows and the vocabulary sample (:mod:`geodiag.analysis.findings`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.peft_adapter import AdapterStore, before
from geodiag.io.formats.tensor_names import original_of
from geodiag.io.sources import remote
from geodiag.io.sources.options import ReadOptions
from geodiag.io.sources.remote import is_remote
from geodiag.io.vocabulary import sidecar as sidecar_mod
from geodiag.io.vocabulary.signature import from_provenance

# transformers' Trainer saves checkpoint-{global_step} (PREFIX_CHECKPOINT_DIR)
TRAINER_CHECKPOINT = re.compile(r"^checkpoint-(?P<step>\d+)$")
OFF_HINT = "--no-auto-reference to measure without it"


@dataclass
class Found:
    """What one source found: the reference and why it is one, or a note on why not."""

    reference: object | None  # a Checkpoint (untyped: geodiag.io.checkpoint imports this module)
    note: str


@dataclass
class Candidate:
    """A before to open (a folder or file; a URL: a str): the caller opens it with the
    checkpoint's options (:func:`geodiag.io.checkpoint.with_reference`), checks it with
    :func:`same_vocab`, and says ``note(reference)`` when it is the one."""

    path: Path | str
    what: str  # whose before it is, in errors and notes
    note: Callable[[object], str]


def candidates(ckpt, opts: ReadOptions) -> Iterator[Candidate | Found]:
    """The befores of ``ckpt``, first first (the module docstring's order): ``--reference``
    (a :class:`Candidate` whose failure is the user's error), else each automatic source's
    answer, a Candidate to open or a :class:`Found` (a before in the same file, or a note on
    why a source gave none). This module only names them: the caller opens them."""
    if opts.reference is not None:
        where = opts.reference if is_remote(opts.reference) else Path(opts.reference)
        yield Candidate(
            where, "--reference", lambda ref: f"reference: {opts.reference} (--reference)"
        )
        return
    for source in AUTOMATIC if opts.auto_reference else ():
        found = source(ckpt)
        if found is not None:
            yield found


# The notes that say what the movement was measured from, or that it was not: ``geodiag
# check`` prints them (geodiag.outputs.ci.check_text), as a verdict may rest on them.
REFERENCE_NOTES = ("reference: ", "no reference: ")


def _local_init(ckpt) -> Path | None:
    """The init checkpoint gti's sidecar (beside a framework's map, or the map in use)
    names, resolved against the checkpoint's folder; None when it names none."""
    side = ckpt.own_sidecar or ckpt.sidecar
    if side is None:
        return None
    folder = ckpt.path if ckpt.path.is_dir() else ckpt.path.parent
    return sidecar_mod.init_checkpoint(side, folder)


def declined(ckpt) -> list[str]:
    """``--no-auto-reference``: the before the files carry, named, and left unused."""
    if is_remote(ckpt.location):
        return []
    init = _local_init(ckpt)
    if init is None or not init.exists():
        return []
    return [
        f"no reference: --no-auto-reference, though {sidecar_mod.FILENAME} names the init "
        f"checkpoint {init}: rows that barely moved since it are not looked for"
    ]


def same_vocab(a, b, where: object, what: str) -> None:
    """Raise unless checkpoints ``a`` and ``b`` have the same new tokens (ids and strings)."""
    if a.new.tokens != b.new.tokens or not np.array_equal(a.new.ids, b.new.ids):
        raise InputError(
            where,
            f"{what}: new tokens differ ({len(a.new.ids)} here, {len(b.new.ids)} in the "
            "checkpoint measured): the movement of a row needs the same row in both",
        )


def _sidecar_init(ckpt) -> Candidate | Found | None:
    side = ckpt.own_sidecar or ckpt.sidecar  # gti's, beside a framework's map
    what = f"the init checkpoint {sidecar_mod.FILENAME} names"
    if is_remote(ckpt.location):  # named from the checkpoint's URL, as from its folder
        rel = side.provenance.get(sidecar_mod.INIT_CHECKPOINT) if side is not None else None
        if not isinstance(rel, str) or not rel:
            return None
        init = remote.beside(ckpt.location, rel)
        if init is None:
            return Found(
                None,
                f"{what}, {rel}, is not reachable from {ckpt.location}: no reference from it "
                "(--reference URL gives one)",
            )
    else:
        init = _local_init(ckpt)
        if init is None:
            return None
        if not init.exists():
            return Found(None, f"{what}, {init}, is not there: no reference from it")

    def note(ref) -> str:
        strategy = trained_init(ref)
        if strategy is None:
            return f"reference: {init}, {what}"
        return (
            f"reference: {init}, {what}; a {strategy} checkpoint, whose "
            "new rows were trained (grounded): movement is measured from it, but a row that "
            "barely moved since is not counted untrained"
        )

    return Candidate(init, what, note)


def trained_init(ref) -> str | None:
    """How a reference whose new rows were trained (a grounded init, as its sidecar's
    signature says: :mod:`geodiag.gate.signature`) names its init; None for any other. A row
    that barely moved since such a reference is trained: grounding moved it."""
    sig = from_provenance(getattr(ref, "provenance", None) or {})
    if sig is None or sig.name != "trained":
        return None
    return f"`gti init --strategy {sig.strategy}`" if sig.strategy else "grounded init"


def _peft_original(ckpt) -> Found | None:
    if isinstance(ckpt.store, AdapterStore):
        return _adapter_before(ckpt)
    names = set(ckpt.store.names())
    matrices = []
    for m in ckpt.matrices:
        original = original_of(m.tensor)
        if original is None or original not in names:
            continue
        if tuple(ckpt.store.shape(original)) != (m.n_rows, m.dim):
            return Found(
                None,
                f"'{original}' is {list(ckpt.store.shape(original))}, not [{m.n_rows}, {m.dim}] "
                f"as '{m.tensor}': not used as the reference",
            )
        matrices.append(replace(m, tensor=original, dtype=ckpt.store.dtype(original)))
    if not matrices:
        return None
    where = ckpt.store.file_of(matrices[0].tensor)  # a URL (str) for a remote checkpoint
    name = str(where).rsplit("/", 1)[-1]
    path = ckpt.path if is_remote(str(where)) else where
    ref = replace(ckpt, path=path, matrices=matrices, reference=None, reference_notes=[])
    return Found(
        ref,
        f"reference: the original_module rows beside the modules_to_save copy in {name} "
        "(PEFT's copy of the module before training)",
    )


def _adapter_before(ckpt) -> Found | None:
    """The adapter's before, for the matrices it changes and carries one of."""
    store, what = before(ckpt.store)
    matrices = [replace(m, dtype=store.dtype(m.tensor)) for m in ckpt.matrices if m.tensor in what]
    if not matrices:
        return None
    weights = str(ckpt.store.info.weights_path)
    kinds = list(dict.fromkeys(what[m.tensor][0] for m in matrices))
    ref = replace(
        ckpt,
        store=store,
        matrices=matrices,
        reference=None,
        reference_notes=[],
        location=" and ".join(kinds),
    )
    shown = "; ".join(f"for '{m.tensor}' {what[m.tensor][1]}" for m in matrices)
    name = weights.rsplit("/", 1)[-1]
    return Found(ref, f"reference: the adapter's before, read from {name} and its base: {shown}")


def _earliest_sibling(ckpt) -> Candidate | None:
    folder = ckpt.path if ckpt.path.is_dir() else ckpt.path.parent
    this = TRAINER_CHECKPOINT.match(folder.name)
    if this is None:
        return None
    earlier = []
    for p in folder.parent.iterdir():
        m = TRAINER_CHECKPOINT.match(p.name)
        if m is not None and p.is_dir() and int(m["step"]) < int(this["step"]):
            earlier.append((int(m["step"]), p))
    if not earlier:
        return None
    step, sibling = min(earlier)
    return Candidate(
        sibling,
        "the run's earliest checkpoint",
        lambda ref: (
            f"reference: {sibling.name}, the run's earliest saved checkpoint: after "
            f"{step} steps, not the initialization, so a row that moved only before step {step} "
            "is not caught"
        ),
    )


# The automatic sources, in precedence order.
AUTOMATIC: tuple[Callable[..., Candidate | Found | None], ...] = (
    _sidecar_init,
    _peft_original,
    _earliest_sibling,
)
