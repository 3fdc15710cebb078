"""A DeepSpeed ZeRO checkpoint read in place: the fp32 master weights that
``zero_to_fp32.py`` consolidates, without torch and without running any code the files carry.

What DeepSpeed (0.19) writes, per tag folder (``global_stepN/``, named by ``latest``):

- ``*model_states.pt`` (``zero_pp_rank_R_mp_rank_00_model_states.pt`` under ZeRO-3, one
  ``mp_rank_00_model_states.pt`` under ZeRO-1/2): ``param_shapes`` (per optimizer group,
  name -> ``torch.Size``, in the order the flat partitions hold them), ``shared_params``
  (tied names), ``buffer_names``, ``frozen_param_shapes`` and ``frozen_param_fragments``
  (parameters that do not train: ZeRO-3 keeps each rank's fragment, ZeRO-1/2 the whole
  tensor), ``module`` (the training-dtype weights: empty under ZeRO-3);
- ``[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt``: rank R's ``optimizer_state_dict``
  with ``zero_stage``, ``partition_count`` and the fp32 partitions: ZeRO-3's
  ``fp32_flat_groups`` (every parameter split into ``ceil(numel / world)`` elements per
  rank, parameters one after the other), ZeRO-1/2's ``single_partition_of_fp32_groups``
  (each group's parameters laid end to end with ``param_alignment_paddings``, the whole
  cut into equal per-rank slices).

``ds_to_universal.py``'s universal folder (``zero/<name>/fp32.pt``, a parameter each) is read
too. Every file is a ``torch.save`` archive: its directory and ``data.pkl`` are read with
``geodiag.io.formats.torch_zip`` and only DeepSpeed's own globals (inert records,
:data:`_GLOBALS`), once per file when the store opens (a few kB per rank, so a cut or
missing rank file stops there); the rows asked for are then read by byte range from the
ranks that hold them, nothing else of the partitions or the optimizer's moments. The
names and values are ``zero_to_fp32``'s: buffers, frozen and trained parameters, tied
names as aliases.
Not read (the ``zero_to_fp32.py`` message instead): tensor or pipeline parallel
(``mp_rank_01``, ``layer_*``), expert-parallel (``expp_rank_*``) files.
"""

from __future__ import annotations

import math
import pickle
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.format import Format, on_disk_only
from geodiag.io.formats.tensor_store import digest_text, new_digest
from geodiag.io.formats.torch_zip import (
    ROW_DTYPES,
    TENSOR_GLOBALS,
    Archive,
    ReadsRows,
    StoredTensor,
    open_archive,
    record,
    torch_size,
)
from geodiag.io.sources.byte_ranges import LocalFile
from geodiag.io.sources.layouts import ZERO_LATEST, check_not_lfs_pointer, zero_folder

WRITER = "DeepSpeed"  # whose classes a pickle may name
_TENSOR = object()  # torch.Tensor, as _rebuild_from_type_v2's new_type


def _rebuild_from_type_v2(func, new_type, args, state):  # noqa: ANN001
    """A tensor pickled with its attributes (``ds_id``): the tensor; no other subclass."""
    if new_type is not _TENSOR or not isinstance(args, tuple):
        raise pickle.UnpicklingError("a tensor subclass other than torch.Tensor")
    return func(*args)


def _rebuild_parameter(data, requires_grad, backward_hooks):  # noqa: ANN001
    return data


def _zero_stage(value: object) -> int:
    """``ZeroStageEnum(value)``: the stage number."""
    if type(value) is not int:
        raise pickle.UnpicklingError(f"ZeroStageEnum of {value!r}")
    return value


def _name_set(items: object) -> set[str]:
    """``set(items)`` of names, as releases before 0.19 pickle the engine's
    ``sparse_tensor_module_names`` (``__builtin__.set`` at torch.save's protocol 2)."""
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise pickle.UnpicklingError("a set of something other than names")
    return set(items)


_GLOBALS: dict[tuple[str, str], object] = {
    **TENSOR_GLOBALS,
    ("torch", "Size"): torch_size,
    ("torch", "Tensor"): _TENSOR,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("deepspeed.runtime.zero.config", "ZeroStageEnum"): _zero_stage,
    ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"): record("LossScaler"),
    ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"): record("DynamicLossScaler"),
    ("deepspeed.utils.tensor_fragment", "fragment_address"): record("fragment_address"),
    # Older releases (tests/geodiag/io/release_data/: 0.14 to 0.18 write it)
    ("__builtin__", "set"): _name_set,
}
_OPTIM = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt")
# Files of a model-parallel rank other than 0, pipeline layers, expert-parallel ranks.
_PARALLEL = re.compile(r"mp_rank_0*[1-9]\d*_|^layer_\d+|expp_rank_")
_MODEL3 = re.compile(r"zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt")


@dataclass(frozen=True)
class _Piece:
    """Elements ``start .. start + numel`` of a flat parameter, stored at byte ``begin``."""

    path: Path
    begin: int
    start: int
    numel: int


@dataclass(frozen=True)
class _Param:
    name: str
    dtype: str
    shape: tuple[int, ...]
    pieces: tuple[_Piece, ...]


def _get(obj: object, key: str, where: Path) -> object:
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(
            where,
            f"not a DeepSpeed ZeRO file geodiag reads (no '{key}'): {_advice(where.parent)}",
        )
    return obj[key]


def _tensor(value: object, where: Path, what: str) -> StoredTensor:
    if not isinstance(value, StoredTensor):
        raise InputError(where, f"{what} is not a tensor")
    return value


class _Files:
    """The archives of a tag folder, each opened (directory and data.pkl) when first needed."""

    def __init__(self) -> None:
        self._open: dict[Path, Archive] = {}
        self.digests: dict[Path, object] = {}  # new_digest()s

    def __call__(self, path: Path) -> Archive:
        if path not in self._open:
            if not path.is_file():
                raise InputError(path.parent, f"'{path.name}' is missing")
            check_not_lfs_pointer(path)
            self._open[path] = open_archive(LocalFile(path), _GLOBALS, WRITER)
            self.digests[path] = new_digest(self._open[path].pickled)
        return self._open[path]

    def piece(self, path: Path, t: StoredTensor, start: int, what: str) -> _Piece:
        return _Piece(path, self(path).data_begin(t, what), start, t.numel)


def _ranks(folder: Path, pattern: re.Pattern, kind: str) -> dict[int, Path]:
    """Rank -> file for the files of ``pattern`` in ``folder`` (model-parallel rank 0: the
    store refuses folders with others)."""
    found = {}
    for p in folder.iterdir():
        if (m := pattern.fullmatch(p.name)) and int(m.group(2)) == 0:
            found[int(m.group(1))] = p
    if not found:
        raise InputError(folder, f"no {kind} files: {_advice(folder)}")
    return found


def _advice(folder: Path) -> str:
    """The way out for a tag folder geodiag does not read (the script sits above it)."""
    return zero_to_fp32_advice(folder.parent)


class ZeroStore(ReadsRows):
    """The fp32 weights of a DeepSpeed ZeRO tag folder (or its universal conversion), as
    ``zero_to_fp32`` consolidates them; rows read by byte range from the ranks holding them.

    ``digests``: the digest (``new_digest``), per file, of its ``data.pkl`` and then every byte range read from it.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files = _Files()
        parallel = sorted(p.name for p in folder.glob("*.pt") if _PARALLEL.search(p.name))
        if parallel:
            raise InputError(
                folder,
                f"tensor- or pipeline-parallel partitions ({parallel[0]}) are not read: "
                + _advice(folder),
            )
        if (folder / "zero").is_dir():
            self._entries = self._universal()
            self.description = f"DeepSpeed universal checkpoint ({len(self._entries)} parameters)"
        else:
            self._entries, stage, world = self._partitions()
            self.description = f"DeepSpeed ZeRO-{stage} checkpoint ({world} ranks, {folder.name}/)"

    # -- layouts --------------------------------------------------------------------------

    def _model_states(self) -> tuple[Path, dict]:
        files = sorted(self.folder.glob("*model_states.pt"))
        if not files:
            raise InputError(self.folder, f"no *model_states.pt: {_advice(self.folder)}")
        first = self.folder / "mp_rank_00_model_states.pt"
        path = first if first.is_file() else _ranks(self.folder, _MODEL3, "model_states")[0]
        state = self._files(path).obj
        return path, state

    def _partitions(self) -> tuple[dict[str, _Param], int, int]:
        path, state = self._model_states()
        optim = _ranks(self.folder, _OPTIM, "*_optim_states.pt")
        first = optim[min(optim)]
        osd = _get(self._files(first).obj, "optimizer_state_dict", first)
        stage = _get(osd, "zero_stage", first)
        count = _get(osd, "partition_count", first)
        world = max(count) if isinstance(count, list) and count else count
        if type(world) is not int or world < 1 or stage not in (1, 2, 3):
            raise InputError(
                first, f"ZeRO stage {stage!r}, partition count {count!r}: {_advice(self.folder)}"
            )
        for r in range(world):
            if r not in optim:
                name = first.name.replace(f"rank_{min(optim)}_", f"rank_{r}_", 1)
                raise InputError(
                    self.folder,
                    f"rank {r}'s partition '{name}' is missing ({world} ranks saved the "
                    "checkpoint): copy the whole folder",
                )
        if len(optim) != world:
            raise InputError(
                self.folder,
                f"{len(optim)} *_optim_states.pt files for {world} ranks: {_advice(self.folder)}",
            )
        params = self._buffers(path, state)
        groups = _get(state, "param_shapes", path)
        if stage == 3:
            frozen = self._frozen3(state, world)
            trained = self._trained3(groups, osd, optim, world)
        else:
            frozen = self._frozen2(path, state)
            trained = self._trained2(groups, osd, optim, world)
        params.update(frozen)
        params.update(trained)
        return _aliased(params, state, path), stage, world

    def _buffers(self, path: Path, state: dict) -> dict[str, _Param]:
        module, names = _get(state, "module", path), state.get("buffer_names") or []
        out = {}
        for name in names:
            if isinstance(module, dict) and name in module:
                t = _tensor(module[name], path, f"buffer '{name}'")
                out[name] = _Param(name, t.dtype, t.size, (self._files.piece(path, t, 0, name),))
        return out

    def _frozen2(self, path: Path, state: dict) -> dict[str, _Param]:
        shapes = state.get("frozen_param_shapes") or {}
        fragments = state.get("frozen_param_fragments") or {}
        out = {}
        for name, shape in shapes.items():
            t = _tensor(fragments.get(name), path, f"frozen parameter '{name}'")
            if t.numel != math.prod(shape):
                raise InputError(path, f"frozen parameter '{name}' holds {t.numel} values")
            piece = self._files.piece(path, t, 0, name)
            out[name] = _Param(name, t.dtype, torch_size(shape), (piece,))
        return out

    def _frozen3(self, state: dict, world: int) -> dict[str, _Param]:
        """Each rank's model states hold its fragment of each frozen parameter; the
        fragments end to end, cut at the parameter's size, are the parameter (as
        ``zero_to_fp32`` concatenates them)."""
        shapes = state.get("frozen_param_shapes") or {}
        if not shapes:
            return {}
        files = _ranks(self.folder, _MODEL3, "model_states")
        for r in range(world):
            if r not in files:
                name = f"zero_pp_rank_{r}_mp_rank_00_model_states.pt"
                raise InputError(self.folder, f"rank {r}'s model states '{name}' are missing")
        out = {}
        for name, shape in shapes.items():
            shape = torch_size(shape)
            numel, at, pieces, dtype = math.prod(shape), 0, [], None
            for r in range(world):
                frozen = _get(self._files(files[r]).obj, "frozen_param_fragments", files[r])
                t = _tensor((frozen or {}).get(name), files[r], f"frozen parameter '{name}'")
                dtype, n = t.dtype, min(t.numel, numel - at)
                if n > 0:
                    pieces.append(_Piece(files[r], self._begin(files[r], t, name), at, n))
                    at += n
            if at != numel:
                raise InputError(files[0], f"frozen parameter '{name}': {at} of {numel} values")
            out[name] = _Param(name, dtype, shape, tuple(pieces))
        return out

    def _begin(self, path: Path, t: StoredTensor, what: str) -> int:
        return self._files(path).data_begin(t, what)

    def _flat_groups(self, osd: dict, path: Path, key: str) -> list[StoredTensor]:
        groups = _get(osd, key, path)
        if not isinstance(groups, list):
            raise InputError(path, f"'{key}' is not a list of tensors")
        return [_tensor(g, path, f"{key}[{i}]") for i, g in enumerate(groups)]

    def _trained3(
        self, groups: list, osd: dict, optim: dict[int, Path], world: int
    ) -> dict[str, _Param]:
        """Element k of a parameter lies on rank k // q at position offset + k % q of the
        rank's groups laid end to end (q = ceil(numel / world); ``zero_to_fp32``'s
        ``GatheredTensor``); each rank's group sizes are rank 0's."""
        flat = self._flat_groups(osd, optim[0], "fp32_flat_groups")
        bounds = np.cumsum([0] + [g.numel for g in flat])
        shapes = {k: torch_size(v) for g in groups for k, v in g.items()}
        lazy = _RankGroups(self, optim, "fp32_flat_groups", [g.numel for g in flat])
        out, offset = {}, 0
        for name, shape in shapes.items():
            numel = math.prod(shape)
            q = math.ceil(numel / world)
            pieces = []
            for r in range(world):
                n = min(q, max(numel - r * q, 0))
                pieces += lazy.pieces(r, offset, n, r * q, bounds, name)
            out[name] = _Param(name, flat[0].dtype, shape, tuple(pieces))
            offset += q
        if offset != bounds[-1]:
            raise InputError(
                optim[0],
                f"the parameters take {offset} of {bounds[-1]} partition values: "
                + _advice(self.folder),
            )
        return out

    def _trained2(
        self, groups: list, osd: dict, optim: dict[int, Path], world: int
    ) -> dict[str, _Param]:
        """Group g's parameters lie end to end (with their alignment paddings) in the ranks'
        partitions of g laid end to end (``zero_to_fp32``'s ZeRO-2 merge)."""
        key = "single_partition_of_fp32_groups"
        flat = self._flat_groups(osd, optim[0], key)
        paddings = osd.get("param_alignment_paddings")
        if len(flat) != len(groups):
            raise InputError(optim[0], f"{len(flat)} partitions for {len(groups)} groups")
        lazy = _RankGroups(self, optim, key, [g.numel for g in flat])
        out = {}
        for g, (shapes, part) in enumerate(zip(groups, flat, strict=True)):
            pads = paddings[g] if paddings else [0] * len(shapes)
            offset, size = 0, part.numel
            for (name, shape), pad in zip(shapes.items(), pads, strict=True):
                shape = torch_size(shape)
                numel = math.prod(shape)
                pieces, at = [], offset
                while at < offset + numel:
                    r = at // size
                    n = min(offset + numel, (r + 1) * size) - at
                    if r >= world:
                        raise InputError(optim[0], f"parameter '{name}' runs past the partitions")
                    pieces += lazy.pieces(r, at - r * size, n, at - offset, None, name, g)
                    at += n
                out[name] = _Param(name, part.dtype, shape, tuple(pieces))
                offset += numel + pad
            align = 2 * world
            if align * math.ceil(offset / align) != align * math.ceil(size * world / align):
                raise InputError(
                    optim[0],
                    f"group {g}: {offset} of {size * world} values consumed: "
                    + _advice(self.folder),
                )
        return out

    def _universal(self) -> dict[str, _Param]:
        """``zero/<name>/fp32.pt``: each parameter whole (flat or shaped), shapes from the
        model states beside when they are flat."""
        shapes: dict[str, tuple[int, ...]] = {}
        state: dict = {}
        if any(self.folder.glob("*model_states.pt")):
            path, state = self._model_states()
            for g in _get(state, "param_shapes", path):
                shapes.update({k: torch_size(v) for k, v in g.items()})
        out = {}
        for d in sorted(p for p in (self.folder / "zero").iterdir() if p.is_dir()):
            path = d / "fp32.pt"
            if not path.is_file():
                continue
            obj = self._files(path).obj
            if isinstance(obj, dict) and "param" in obj:
                obj = obj["param"]
            t = _tensor(obj, path, f"parameter '{d.name}'")
            shape = shapes.get(d.name, t.size)
            if math.prod(shape) != t.numel:
                raise InputError(path, f"holds {t.numel} values for shape {list(shape)}")
            piece = self._files.piece(path, t, 0, d.name)
            out[d.name] = _Param(d.name, t.dtype, shape, (piece,))
        if not out:
            raise InputError(self.folder / "zero", f"no <name>/fp32.pt: {_advice(self.folder)}")
        if state:  # buffers and frozen parameters have no optimizer state: the model states
            ranks = [p for p in self.folder.iterdir() if _MODEL3.fullmatch(p.name)]
            frozen = self._frozen3(state, len(ranks)) if ranks else self._frozen2(path, state)
            kept = {**self._buffers(path, state), **frozen}
            out.update({k: v for k, v in kept.items() if k not in out})
        return _aliased(out, state, self.folder)

    # -- the store ------------------------------------------------------------------------

    def file_of(self, name: str) -> Path:
        p = self._entry(name)
        return p.pieces[0].path if p.pieces else self.folder

    def _read(self, name: str, rows: np.ndarray) -> tuple[_Param, np.ndarray]:
        """Stored values of ``rows`` (sorted, unique), ``(len(rows), d)``: one byte range per
        run of adjacent rows in each piece that holds it."""
        p = self._entry(name)
        if len(p.shape) != 2 or p.dtype not in ROW_DTYPES:
            raise InputError(
                self.folder, f"tensor '{name}' ({p.dtype}, {list(p.shape)}) is not a 2-D float"
            )
        d, dt = p.shape[1], np.dtype(ROW_DTYPES[p.dtype])
        out = np.empty(len(rows) * d, dtype=dt)
        starts = np.array([pc.start for pc in p.pieces], dtype=np.int64)
        by_file: dict[Path, list[tuple[int, int, int]]] = {}  # (byte begin, bytes, out at)
        breaks = np.flatnonzero(np.diff(rows) > 1) + 1
        for run in np.split(np.arange(len(rows)), breaks):
            if not len(run):
                continue
            a, b, at = int(rows[run[0]]) * d, (int(rows[run[-1]]) + 1) * d, int(run[0]) * d
            i = int(np.searchsorted(starts, a, side="right")) - 1
            while a < b:
                pc = p.pieces[i]
                e = min(b, pc.start + pc.numel)
                spans = by_file.setdefault(pc.path, [])
                spans.append((pc.begin + (a - pc.start) * dt.itemsize, (e - a) * dt.itemsize, at))
                at, a, i = at + e - a, e, i + 1
        for path, spans in by_file.items():
            digest = self._files.digests.setdefault(path, new_digest())
            data = LocalFile(path).read([(s[0], s[1]) for s in spans])
            for (_, _, at), chunk in zip(spans, data, strict=True):
                digest.update(chunk)
                values = np.frombuffer(chunk, dtype=dt)
                out[at : at + len(values)] = values
        return p, out.reshape(len(rows), d)

    def digests(self) -> dict[str, str]:
        return {str(p): digest_text(d) for p, d in self._files.digests.items()}


class _RankGroups:
    """The ranks' fp32 partitions (``key`` of each optimizer state), each rank's
    ``data.pkl`` read once; every rank's groups must have the sizes ``sizes`` (rank 0's)."""

    def __init__(self, store: ZeroStore, optim: dict[int, Path], key: str, sizes: list[int]):
        self._store, self._optim, self._key, self._sizes = store, optim, key, sizes
        self._groups: dict[int, list[StoredTensor]] = {}

    def _of(self, r: int) -> list[StoredTensor]:
        if r not in self._groups:
            path = self._optim[r]
            osd = _get(self._store._files(path).obj, "optimizer_state_dict", path)
            groups = self._store._flat_groups(osd, path, self._key)
            if [g.numel for g in groups] != self._sizes:
                raise InputError(
                    path, f"its partitions differ in size from rank 0's: {_advice(path.parent)}"
                )
            self._groups[r] = groups
        return self._groups[r]

    def pieces(self, r, at, n, start, bounds, what, group=None) -> list[_Piece]:  # noqa: ANN001
        """Pieces for ``n`` elements from position ``at`` of rank ``r``'s partition: of its
        groups laid end to end (``bounds``: their cumulative sizes), or of group ``group``."""
        out = []
        path = self._optim[r]
        while n > 0:
            if group is None:
                g = int(np.searchsorted(bounds, at, side="right")) - 1
                local = at - int(bounds[g])
                take = min(n, int(bounds[g + 1]) - at)
            else:
                g, local, take = group, at, n
            t = self._of(r)[g]
            begin = self._store._begin(path, t, f"{self._key}[{g}]")
            itemsize = np.dtype(ROW_DTYPES[t.dtype]).itemsize
            out.append(_Piece(path, begin + local * itemsize, start, take))
            at, n, start = at + take, n - take, start + take
        return out


def _aliased(params: dict[str, _Param], state: dict, where: Path) -> dict[str, _Param]:
    """``shared_params`` (a tied head -> the embedding): the same tensor under both names."""
    shared = state.get("shared_params") or {} if isinstance(state, dict) else {}
    if not isinstance(shared, dict):
        raise InputError(where, "shared_params is not a mapping")
    for alias, source in shared.items():
        if source in params:
            params[alias] = params[source]
    return params


def zero_weights(p: Path) -> Path | None:
    """The DeepSpeed ZeRO folder holding ``p``'s weights: ``p`` itself, the tag its
    ``latest`` names (what DeepSpeed loads), else its one ``global_step*/``; None when
    there is none."""
    if zero_folder(p):
        return p
    latest = p / ZERO_LATEST
    if latest.is_file():
        try:
            tag = latest.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(latest, f"cannot read the tag it names ({e})") from None
        if not tag or "/" in tag or not zero_folder(p / tag):
            raise InputError(
                latest,
                f"names tag '{tag}', which is not a ZeRO checkpoint folder in {p}: pass the "
                "global_step*/ folder to read",
            )
        return p / tag
    steps = sorted(d for d in p.glob("global_step*") if d.is_dir() and zero_folder(d))
    if len(steps) > 1:
        raise InputError(
            p,
            f"several DeepSpeed tags ({', '.join(d.name for d in steps)}) and no 'latest': "
            "pass the global_step*/ folder to read",
        )
    return steps[0] if steps else None


def zero_to_fp32_advice(p: Path | None = None) -> str:
    """How to consolidate a DeepSpeed checkpoint folder ``p`` geodiag does not read."""
    here = p / "zero_to_fp32.py" if p is not None else None
    script = here if here is not None and here.is_file() else "zero_to_fp32.py"
    return (
        f"consolidate it with `python {script} {p or 'CHECKPOINT'} OUT/ --safe_serialization` "
        "(DeepSpeed saves the script beside the partitions), or save with "
        "stage3_gather_16bit_weights_on_model_save"
    )


REMOTE = (
    "a DeepSpeed ZeRO checkpoint (it has 'latest'): read in place on disk only "
    "(finding its rank files needs a listing a URL cannot give): download the "
    "folder and check it, or consolidate it with its zero_to_fp32.py"
)


url = on_disk_only(ZERO_LATEST, REMOTE)  # a URL folder with DeepSpeed's ``latest``: named, not read


FORMAT = Format(
    name="DeepSpeed ZeRO",
    what="ZeRO-1/2/3 partitions (`global_stepN/`, named by `latest`) or a universal folder: "
    "the fp32 rows `zero_to_fp32` consolidates, by byte ranges from the ranks that hold them",
    find=lambda path: None if path.is_file() else zero_weights(path),
    open=lambda found, asked: ZeroStore(found),
    url=url,
    remote=REMOTE,
    files=(r"[^/]*model_states\.pt",),
)
