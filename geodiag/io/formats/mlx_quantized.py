"""MLX-quantized safetensors (``mlx_lm.convert -q``) as a :class:`~geodiag.io.formats.tensor_store.TensorStore`.

mlx-lm stores a quantized matrix ``M`` as three tensors: ``M.weight``, U32 words packing
each row's unsigned ``bits``-bit integers; ``M.scales`` and ``M.biases``, one value per
group of ``group_size`` consecutive elements of a row (F16, BF16 or F32: the model's
dtype). config.json says ``"quantization": {"group_size": 64, "bits": 4, "mode":
"affine"}``, with per-module entries (``"model.embed_tokens": {...}``) overriding it.

Read as mlx reads it (mlx ``ops.cpp``: ``affine_quantize``/``affine_dequantize``; the CPU
and Metal kernels' ``extract_bits``), checked bit for bit against ``mx.dequantize`` in
``tests/geodiag/io/formats/test_mlx_quantized.py``:

- packing: a row's words, little-endian, are one bit stream, least significant bit first;
  element ``j`` is bits ``[j*bits, (j+1)*bits)`` of it. For 3, 5 and 6 bits an element
  can straddle two words;
- affine: ``w = scale * q + bias``, computed as ``mx.dequantize`` does on the CPU, in the
  scales' dtype: the product rounded to it, then the sum (on Metal the kernel may fuse
  the two into one rounding: at most one unit in the last place of F16/BF16 apart).

The store presents ``M.weight`` with its logical shape ``[rows, hidden]`` and a dtype such
as ``U32 (MLX affine 4-bit, group 64, BF16 scales)``, hides ``M.scales``/``M.biases``, and
reads only the rows asked for (the packed words, scales and biases of those rows). The
other modes (mxfp4, mxfp8, nvfp4: U8 scales, no biases) are named and refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.safetensors import bf16_to_float32, float32_to_bf16
from geodiag.io.formats.tensor_store import PackedSource
from geodiag.jsonio import read_json_object

BITS = (2, 3, 4, 5, 6, 8)  # what mx.quantize packs in affine mode
AFFINE = "affine"
# mlx's (group_size, bits) when config.json leaves them out (ops.cpp,
# quantization_params_from_mode); the modes other than affine are named, not read.
_DEFAULTS = {AFFINE: (64, 4), "mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}
NOT_READ = tuple(m for m in _DEFAULTS if m != AFFINE)
SCALE_DTYPES = ("F16", "BF16", "F32")
_SIDECARS = (".scales", ".biases")
_WEIGHT = ".weight"
# Rows dequantized at a time: a few float32 temporaries of (rows, hidden) live at once,
# 16 MB each at 1,024 rows of 4,096 dims (the blocks iter_original reads are as large).
_UNPACK_ROWS = 1024


@dataclass(frozen=True)
class Packing:
    """How one matrix is quantized: its parameters and the dtype of its scales."""

    bits: int
    group_size: int
    hidden: int  # logical row width
    scale_dtype: str  # F16 | BF16 | F32

    def label(self) -> str:
        return (
            f"U32 (MLX {AFFINE} {self.bits}-bit, group {self.group_size}, "
            f"{self.scale_dtype} scales)"
        )


# bits -> (values per pack, bytes per pack): a pack is the fewest whole bytes holding whole
# values (mlx's get_pack_factor / get_bytes_per_pack), so no value straddles two packs.
_PACKS = {2: (4, 1), 3: (8, 3), 4: (2, 1), 5: (8, 5), 6: (4, 3), 8: (1, 1)}


def unpack(words: np.ndarray, bits: int, hidden: int) -> np.ndarray:
    """(k, hidden) uint8 integers from (k, hidden * bits / 32) uint32 words: element j is
    bits [j*bits, (j+1)*bits) of the row's little-endian, LSB-first bit stream."""
    per_pack, n_bytes = _PACKS[bits]
    raw = np.ascontiguousarray(words, dtype="<u4").view(np.uint8)
    raw = raw.reshape(len(raw), hidden // per_pack, n_bytes)  # (k, packs, bytes)
    if n_bytes == 1:  # 2, 4, 8 bits: values never cross a byte
        packs = raw[..., 0]
    else:  # 3, 5, 6 bits: a value can cross bytes (and words); a pack holds 24 or 40 bits
        packs = np.zeros(raw.shape[:2], np.uint64)
        for i in range(n_bytes):
            packs |= raw[..., i].astype(np.uint64) << np.uint64(8 * i)
    shifts = (np.arange(per_pack) * bits).astype(packs.dtype)
    values = (packs[..., None] >> shifts) & packs.dtype.type((1 << bits) - 1)
    return values.reshape(len(raw), hidden).astype(np.uint8, copy=False)


def _round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 ``x`` rounded to ``dtype`` (nearest even), returned as float32 (exact)."""
    if dtype == "F16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "BF16":
        return bf16_to_float32(float32_to_bf16(x))
    return x


def dequantize(
    words: np.ndarray,
    scales: np.ndarray,
    biases: np.ndarray,
    *,
    bits: int,
    group_size: int,
    scale_dtype: str,
) -> np.ndarray:
    """(k, hidden) float32 rows, as ``mx.dequantize`` computes them on the CPU.

    ``words`` (k, hidden*bits/32) uint32; ``scales``, ``biases`` (k, hidden/group_size),
    values of ``scale_dtype`` held in float32. Each group's ``scale * q + bias`` in
    ``scale_dtype``: the product, then the sum, each rounded to it. For F16 and BF16
    scales float32 computes both exactly enough: q * scale is exact (at most 8 + 11
    significant bits), and a float32 sum rounded again to F16 or BF16 is the correctly
    rounded sum (24 >= 2 * 11 + 2 bits); F32 scales are mlx's float32 arithmetic itself.
    """
    k, n_groups = scales.shape
    q = unpack(words, bits, n_groups * group_size).reshape(k, n_groups, group_size)
    s = np.asarray(scales, np.float32)[..., None]  # (k, groups, 1): broadcast, not repeated
    b = np.asarray(biases, np.float32)[..., None]
    w = _round_to(q * s, scale_dtype)  # q * s: float32, uint8 promoted exactly
    w += b
    return _round_to(w, scale_dtype).reshape(k, n_groups * group_size)


def quantization_of(config: dict) -> dict | None:
    """The ``quantization`` section mlx-lm writes (its copy ``quantization_config`` when
    alone; a Hugging Face ``quantization_config`` naming a ``quant_method`` is not MLX's)."""
    q = config.get("quantization")
    if q is None:
        q = config.get("quantization_config")
        if isinstance(q, dict) and "quant_method" in q:
            return None
    return q if isinstance(q, dict) else None


def module_params(quantization: dict, module: str) -> tuple[str, int, int] | None:
    """(mode, group_size, bits) of ``module`` as mlx-lm's loader decides: its own entry
    (a dict, or False: not quantized), else the top-level fields; None when not quantized."""
    entry = quantization.get(module, True)
    if entry is False:
        return None
    params = entry if isinstance(entry, dict) else quantization
    mode = params.get("mode", AFFINE)
    group_size, bits = _DEFAULTS.get(mode, (None, None))
    return mode, params.get("group_size", group_size), params.get("bits", bits)


class MLXQuantizedStore:
    """A safetensors store whose MLX-packed matrices read as dequantized float rows."""

    dequantizes = True  # a deployed file: drift reports what quantization did

    def __init__(self, inner: PackedSource, config_path: Path) -> None:
        self.inner = inner
        self.config_path = config_path
        names = inner.names()
        present = set(names)
        self._packed = {
            n
            for n in names
            if n.endswith(_WEIGHT) and _module(n) + ".scales" in present and inner.dtype(n) == "U32"
        }
        hidden = {_module(n) + s for n in self._packed for s in _SIDECARS}
        self._names = [n for n in names if n not in hidden]
        self._packing: dict[str, Packing] = {}
        self._quantization: dict | None = None
        self.description = f"{inner.description}, MLX-quantized"

    # -- the TensorStore questions --------------------------------------------------

    @property
    def packed(self) -> list[str]:
        """The MLX-packed matrices (their ``.weight`` names), read dequantized."""
        return sorted(self._packed)

    def names(self) -> list[str]:
        return list(self._names)

    def file_of(self, name: str) -> Path:
        return self.inner.file_of(name)

    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self._packed:
            return self.inner.shape(name)
        return (self.inner.shape(name)[0], self.packing(name).hidden)

    def dtype(self, name: str) -> str:
        return self.packing(name).label() if name in self._packed else self.inner.dtype(name)

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        """(k, hidden) rows ``rows`` dequantized as mlx does: float32 when asked (exact: the
        values are F16, BF16 or F32 numbers), else float64."""
        if name not in self._packed:
            return self.inner.read_rows(name, rows, float32)
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.packing(name).hidden), np.float32 if float32 else float)
        for start in range(0, len(rows), _UNPACK_ROWS):
            block = rows[start : start + _UNPACK_ROWS]
            out[start : start + len(block)] = self._dequantized(name, block)
        return out

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        if name not in self._packed:
            return self.inner.read_block(name, start, stop, float32)
        stop = min(stop, self.inner.shape(name)[0])
        return self.read_rows(name, np.arange(start, max(stop, start)), float32)

    def digests(self) -> dict[str, str]:
        return self.inner.digests()

    # -- MLX's packing ----------------------------------------------------------------

    def _dequantized(self, name: str, rows: np.ndarray) -> np.ndarray:
        p = self.packing(name)
        module = _module(name)
        return dequantize(
            self.inner.read_words(name, rows),
            self.inner.read_rows(module + ".scales", rows, float32=True),
            self.inner.read_rows(module + ".biases", rows, float32=True),
            bits=p.bits,
            group_size=p.group_size,
            scale_dtype=p.scale_dtype,
        )

    def packing(self, name: str) -> Packing:
        """The packing of ``name``, from config.json and the three tensors' shapes, checked
        when first asked for (a checkpoint whose other layers are odd still reads)."""
        if name not in self._packing:
            self._packing[name] = self._check(name)
        return self._packing[name]

    def _check(self, name: str) -> Packing:
        module, where = _module(name), self.inner.file_of(name)
        scales_name, biases_name = module + ".scales", module + ".biases"
        scale_dtype = self.inner.dtype(scales_name)
        mode, group_size, bits = self._params(module, name)
        if mode != AFFINE or scale_dtype == "U8":  # U8 scales: a microscaling mode's
            shown = f"'{mode}'" if mode != AFFINE else f"{'/'.join(NOT_READ)} (U8 scales)"
            raise InputError(
                where,
                f"tensor '{name}' is quantized in MLX's {shown} mode; geodiag reads MLX's "
                f"affine mode only, not {', '.join(NOT_READ)}: dequantize it "
                "(mlx_lm.convert --dequantize) and point geodiag at that",
            )
        if bits not in BITS or not isinstance(group_size, int) or group_size <= 0:
            raise InputError(
                self.config_path,
                f"'{module}' is quantized with bits={bits!r}, group_size={group_size!r}; MLX's "
                f"affine mode packs bits {', '.join(map(str, BITS))} in groups of 32, 64 or 128",
            )
        if scale_dtype not in SCALE_DTYPES:
            raise InputError(
                where,
                f"tensor '{scales_name}' has dtype {scale_dtype}; MLX's affine scales are "
                f"{', '.join(SCALE_DTYPES)}",
            )
        if biases_name not in set(self.inner.names()):
            raise InputError(where, f"'{scales_name}' has no '{biases_name}' beside it")
        if self.inner.dtype(biases_name) != scale_dtype:
            raise InputError(
                where,
                f"tensor '{biases_name}' is {self.inner.dtype(biases_name)} but "
                f"'{scales_name}' is {scale_dtype}: MLX stores both in the model's dtype",
            )
        return Packing(bits, group_size, _hidden(self.inner, name, bits, group_size), scale_dtype)

    def _params(self, module: str, name: str) -> tuple[str, object, object]:
        if self._quantization is None and self.config_path.is_file():
            self._quantization = quantization_of(read_json_object(self.config_path))
        quantization = self._quantization
        if quantization is None:
            raise InputError(
                self.config_path if self.config_path.is_file() else self.inner.file_of(name),
                f"tensor '{name}' is U32 with '{module}.scales' beside it (MLX's quantized "
                "layout), but no config.json beside it says how it was packed (a "
                "'quantization' object with bits and group_size, as mlx_lm.convert writes)",
            )
        params = module_params(quantization, module)
        if params is None:
            raise InputError(
                self.config_path,
                f"'quantization' says '{module}' is not quantized, but tensor '{name}' is "
                f"U32 with '{module}.scales' beside it",
            )
        return params


def _module(name: str) -> str:
    return name[: -len(_WEIGHT)] if name.endswith(_WEIGHT) else name


def _hidden(inner: PackedSource, name: str, bits: int, group_size: int) -> int:
    """The logical row width of packed ``name``, once the three shapes agree with it."""
    module, where = _module(name), inner.file_of(name)
    packed = inner.shape(name)
    scales, biases = inner.shape(module + ".scales"), inner.shape(module + ".biases")
    label = f"{bits}-bit, group {group_size}"
    if len(packed) != 2 or len(scales) != 2 or scales != biases or scales[0] != packed[0]:
        raise InputError(
            where,
            f"tensor '{name}' is {list(packed)} with scales {list(scales)} and biases "
            f"{list(biases)}: MLX stores [rows, words] beside [rows, groups] twice",
        )
    if packed[1] * 32 % bits:
        raise InputError(
            where,
            f"tensor '{name}' packs {packed[1]} words per row, which is no whole number of "
            f"{bits}-bit values ({label} per config.json)",
        )
    hidden = packed[1] * 32 // bits
    if scales[1] * group_size != hidden:
        raise InputError(
            where,
            f"tensor '{name}' packs {hidden} values per row ({packed[1]} words at {bits} "
            f"bits) but '{module}.scales' has {scales[1]} groups of {group_size} "
            f"(= {scales[1] * group_size}): not {label} as config.json says",
        )
    return hidden


def dequantizing(store: PackedSource, path: Path) -> PackedSource | MLXQuantizedStore:
    """``store`` itself, or an :class:`MLXQuantizedStore` over it when it holds MLX-packed
    matrices (a U32 ``M.weight`` with ``M.scales`` beside it); config.json is the one
    beside the weights (``path``: the folder, or the weights file)."""
    names = set(store.names())
    if not any(n.endswith(_WEIGHT) and _module(n) + ".scales" in names for n in names):
        return store
    root = path if path.is_dir() else path.parent
    wrapped = MLXQuantizedStore(store, root / "config.json")
    return wrapped if wrapped.packed else store
