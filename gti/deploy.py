"""The study's last step: a gti checkpoint as the GGUF file llama.cpp serves.

Every step is llama.cpp's own code (:mod:`gti.llama_cpp` fetches and builds it):

1. ``convert_hf_to_gguf.py`` writes :data:`CONVERTER_TYPES` itself; the new tokens keep
   their ids and carry token type USER_DEFINED.
2. :data:`REQUANTIZED_TYPES`: the F32 file requantized with gguf-py's writer
   (``gguf.quants.quantize``): every 2-D weight whose rows are whole blocks, as
   llama-quantize does for a pure type; 1-D tensors (norms) stay F32.
3. :data:`QUANTIZER_TYPES`, the K-quants gguf-py dequantizes but cannot write: the F32
   file through llama.cpp's C++ ``llama-quantize``, built once (cmake, a C/C++ compiler).

``python -m gti.deploy CKPT OUT.gguf --type q4_k_m``; then ``geodiag drift CKPT OUT.gguf``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from geodiag.errors import InputError, require_extra
from gti.llama_cpp import CACHE, locate_converter, locate_quantizer, quantize

CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")  # written by convert_hf_to_gguf.py itself
REQUANTIZED_TYPES = ("q4_0", "q4_1", "q5_0", "q5_1")  # by gguf-py's writer, from F32
QUANTIZER_TYPES = ("q4_k_m", "q5_k_m", "q6_k", "q2_k")  # by llama-quantize, from F32
TYPES = CONVERTER_TYPES + REQUANTIZED_TYPES + QUANTIZER_TYPES  # what --type takes
# What convert_hf_to_gguf.py imports beyond the standard library and its own gguf-py:
# checked before the sdist is fetched, so a missing one costs no download.
CONVERTER_NEEDS = ("numpy", "torch", "transformers", "sentencepiece")
DEPLOY_INSTALL = "pip install 'geodiag[deploy]'"


def convert(checkpoint: Path, out: Path, outtype: str = "f32", cache: Path = CACHE) -> Path:
    """``convert_hf_to_gguf.py CKPT --outtype T --outfile OUT`` with its own gguf-py."""
    if outtype not in CONVERTER_TYPES:
        raise InputError("--type", f"the converter writes {', '.join(CONVERTER_TYPES)}")
    require_extra("gti.deploy", "llama.cpp's converter", CONVERTER_NEEDS, DEPLOY_INSTALL)
    script = locate_converter(cache)
    env = {**os.environ, "PYTHONPATH": str(script.parent / "gguf-py")}
    cmd = [sys.executable, str(script), str(checkpoint), "--outtype", outtype]
    proc = subprocess.run([*cmd, "--outfile", str(out)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(checkpoint, f"convert_hf_to_gguf.py failed: {tail}")
    return out


def writable_type(qtype: str):
    """The ``gguf.GGMLQuantizationType`` named ``qtype``, when gguf-py can write it (one
    block is quantized to find out, before any file is converted or written)."""
    import gguf
    import numpy as np

    try:
        target = gguf.GGMLQuantizationType[qtype.upper()]
    except KeyError:
        raise InputError("--type", f"unknown ggml type {qtype!r}") from None
    try:
        block = gguf.GGML_QUANT_SIZES[target][0]
        gguf.quants.quantize(np.zeros((1, block), np.float32), target)
    except (NotImplementedError, KeyError):
        raise InputError(
            "--type", f"gguf-py cannot write {target.name} (llama.cpp's llama-quantize can)"
        ) from None
    return target


def requantize(src: Path, dst: Path, qtype: str) -> Path:
    """A copy of the GGUF ``src`` with its 2-D F32/F16 weights quantized to ``qtype`` by
    gguf-py (metadata and other tensors copied as they are)."""
    import gguf
    import numpy as np

    target = writable_type(qtype)
    block = gguf.GGML_QUANT_SIZES[target][0]
    reader = gguf.GGUFReader(src)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(dst, arch=arch)
    copy_metadata(reader, writer, skip=(gguf.Keys.General.FILE_TYPE,))
    file_type = getattr(gguf.LlamaFileType, f"MOSTLY_{target.name}", None)
    if file_type is not None:
        writer.add_file_type(file_type)
    floats = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
    for t in reader.tensors:
        data = np.asarray(t.data)
        if t.tensor_type in floats and data.ndim == 2 and data.shape[1] % block == 0:
            q = gguf.quants.quantize(data.astype(np.float32), target)
            writer.add_tensor(t.name, q, raw_dtype=target)
        else:
            writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def copy_metadata(reader, writer, skip: tuple[str, ...] = ()) -> None:
    """Every key of a ``gguf.GGUFReader`` into a ``gguf.GGUFWriter`` (not the header's
    own GGUF.* fields, nor the architecture the writer was made with)."""
    import gguf

    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in (
            gguf.Keys.General.ARCHITECTURE,
            *skip,
        ):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)


def export(checkpoint: Path, out: Path, qtype: str, cache: Path = CACHE) -> Path:
    """``checkpoint`` as a GGUF of type ``qtype`` (one of :data:`TYPES`): the converter's
    own when it writes it, else its F32 file requantized by gguf-py or by llama-quantize.
    Every check (the type, the converter's modules, the build tools) comes before any
    download."""
    qtype = qtype.lower()
    if qtype not in TYPES:
        raise InputError("--type", f"{qtype!r} is not one of {', '.join(TYPES)}")
    if qtype in CONVERTER_TYPES:
        return convert(checkpoint, out, qtype, cache)
    require_extra("gti.deploy", "llama.cpp's converter", CONVERTER_NEEDS, DEPLOY_INSTALL)
    kquant = qtype in QUANTIZER_TYPES
    if kquant:
        binary = locate_quantizer(cache, why=f"--type {qtype}")
    else:
        writable_type(qtype)
    with tempfile.TemporaryDirectory(prefix="gguf-f32-", dir=out.parent) as tmp:
        f32 = convert(checkpoint, Path(tmp) / "f32.gguf", "f32", cache)
        return quantize(f32, out, qtype, binary) if kquant else requantize(f32, out, qtype)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gti.deploy", description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", type=Path, help="a gti (Hugging Face) checkpoint folder")
    p.add_argument("out", type=Path, help="the .gguf file to write")
    p.add_argument("--type", default="q8_0", type=str.lower, help=", ".join(TYPES))
    p.add_argument("--cache", type=Path, default=CACHE, help="where llama.cpp's tools are kept")
    args = p.parse_args(argv)
    try:
        print(export(args.checkpoint, args.out, args.type, args.cache))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
