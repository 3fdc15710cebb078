"""The study's last step: a gti checkpoint as the GGUF file llama.cpp serves.

Two steps, both llama.cpp's own code:

1. ``convert_hf_to_gguf.py`` (from the llama-cpp-python sdist on PyPI, which vendors
   llama.cpp; fetched once with ``pip download --no-binary`` into ``.cache/llama.cpp/``,
   never built, never committed) writes F32, F16, BF16 or Q8_0; the new tokens keep
   their ids and carry token type USER_DEFINED.
2. For the other block types gguf-py can write (``gguf.quants.quantize``: Q4_0, Q4_1,
   Q5_0, Q5_1, ...), the F32 file is requantized with gguf-py's writer: every 2-D weight
   whose rows are whole blocks, as llama-quantize does for a pure type; 1-D tensors
   (norms) stay F32. K-quants (Q4_K, Q6_K, ...) need llama.cpp's C++ ``llama-quantize``:
   gguf-py dequantizes them but cannot write them.

``python -m gti.deploy CKPT OUT.gguf --type q4_0``; then ``geodiag drift CKPT OUT.gguf``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from geodiag.errors import InputError, require_extra

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"  # vendors the llama.cpp the table was made with
CACHE = Path(".cache") / "llama.cpp"
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")  # written by convert_hf_to_gguf.py itself
# What convert_hf_to_gguf.py imports beyond the standard library and its own gguf-py:
# checked before the sdist is fetched, so a missing one costs no download.
CONVERTER_NEEDS = ("numpy", "torch", "transformers", "sentencepiece")
DEPLOY_INSTALL = "pip install 'geodiag[deploy]'"
_VENDOR = "vendor/llama.cpp/"
_MEMBERS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")


def locate_converter(cache: Path = CACHE) -> Path:
    """``convert_hf_to_gguf.py`` of :data:`LLAMA_CPP_PYTHON`, fetched into ``cache`` once."""
    version = LLAMA_CPP_PYTHON.partition("==")[2]
    root = cache / version
    script = root / "convert_hf_to_gguf.py"
    if script.is_file():
        return script
    with tempfile.TemporaryDirectory(prefix="llama-sdist-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        proc = subprocess.run([*cmd, LLAMA_CPP_PYTHON, "-d", tmp], capture_output=True, text=True)
        sdists = sorted(Path(tmp).glob("*.tar.gz"))
        if proc.returncode != 0 or len(sdists) != 1:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise InputError(f"pip download {LLAMA_CPP_PYTHON}", f"failed: {tail}")
        staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=_mkdir(cache)))
        with tarfile.open(sdists[0]) as tar:
            for m in tar.getmembers():
                rel = m.name.partition("/")[2]  # drop the sdist's top folder
                if rel.startswith(_VENDOR) and rel[len(_VENDOR) :].startswith(_MEMBERS):
                    m.name = rel[len(_VENDOR) :]
                    tar.extract(m, staging, filter="data")
        staging.rename(root)  # whole or not at all
    return script


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


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
    """``checkpoint`` as a GGUF of type ``qtype``: the converter's own when it writes it,
    else its F32 file requantized by gguf-py."""
    if qtype.lower() in CONVERTER_TYPES:
        return convert(checkpoint, out, qtype.lower(), cache)
    writable_type(qtype)
    with tempfile.TemporaryDirectory(prefix="gguf-f32-", dir=out.parent) as tmp:
        f32 = convert(checkpoint, Path(tmp) / "f32.gguf", "f32", cache)
        return requantize(f32, out, qtype)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gti.deploy", description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", type=Path, help="a gti (Hugging Face) checkpoint folder")
    p.add_argument("out", type=Path, help="the .gguf file to write")
    p.add_argument("--type", default="q8_0", help="f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1")
    p.add_argument("--cache", type=Path, default=CACHE, help="where the converter is kept")
    args = p.parse_args(argv)
    try:
        print(export(args.checkpoint, args.out, args.type, args.cache))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
