"""llama.cpp's own tools, from the llama-cpp-python sdist on PyPI (which vendors llama.cpp).

- ``convert_hf_to_gguf.py`` (Python): extracted from the sdist, never built.
- ``llama-quantize`` (C++), for the K-quants gguf-py cannot write: built once from the
  same sdist with cmake, that one target only, CPU only (no CUDA, Metal, BLAS, OpenMP,
  network), llama.cpp's own libraries linked in, so the one binary is all that is kept.

Everything lives under ``.cache/llama.cpp/``, never committed: the sdist (fetched once
with ``pip download --no-binary``, about a minute, and kept, so building the quantizer
after the converter costs no second download), ``<version>/`` (the converter) and
``<version>-bin/llama-quantize``. Each is published by one rename: whole or absent.
What a build needs (cmake, a C and a C++ compiler, ninja or make) is checked before
anything is fetched.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from geodiag.errors import InputError

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"  # vendors the llama.cpp the table was made with
VERSION = LLAMA_CPP_PYTHON.partition("==")[2]
CACHE = Path(".cache") / "llama.cpp"
QUANTIZER = "llama-quantize"
_VENDOR = "vendor/llama.cpp/"
_CONVERTER_MEMBERS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
_NOT_BUILT = ("models/", "docs/", "media/", ".github/")  # vocab files, pages: ~120 MB unread
# Every llama.cpp target is configured (tools/CMakeLists.txt adds them all); only
# llama-quantize is built. GGML_NATIVE=OFF: the binary runs on any x86-64 with AVX2, and
# quantization itself runs ggml's reference C code, the same on every CPU.
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DGGML_CUDA=OFF",
    "-DGGML_METAL=OFF",
    "-DGGML_VULKAN=OFF",
    "-DGGML_BLAS=OFF",
    "-DGGML_OPENMP=OFF",
    "-DGGML_CCACHE=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
)
# What the build runs: (what, the environment variable that names it, the names tried).
BUILD_TOOLS = (
    ("cmake", None, ("cmake",)),
    ("a C compiler", "CC", ("cc", "gcc", "clang")),
    ("a C++ compiler", "CXX", ("c++", "g++", "clang++")),
    ("ninja or make", None, ("ninja", "make")),
)


def sdist_path(cache: Path = CACHE) -> Path:
    return cache / f"llama_cpp_python-{VERSION}.tar.gz"


def converter_path(cache: Path = CACHE) -> Path:
    return cache / VERSION / "convert_hf_to_gguf.py"


def quantizer_path(cache: Path = CACHE) -> Path:
    return cache / f"{VERSION}-bin" / QUANTIZER


def fetch_sdist(cache: Path = CACHE) -> Path:
    """The :data:`LLAMA_CPP_PYTHON` sdist, downloaded into ``cache`` once."""
    target = sdist_path(cache)
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory(prefix="llama-sdist-", dir=_mkdir(cache)) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        proc = subprocess.run([*cmd, LLAMA_CPP_PYTHON, "-d", tmp], capture_output=True, text=True)
        sdists = sorted(Path(tmp).glob("*.tar.gz"))
        if proc.returncode != 0 or len(sdists) != 1:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise InputError(f"pip download {LLAMA_CPP_PYTHON}", f"failed: {tail}")
        os.replace(sdists[0], target)  # whole or not at all
    return target


def _extract(sdist: Path, dest: Path, wanted) -> None:
    """The members of the sdist's ``vendor/llama.cpp/`` whose path there ``wanted``
    accepts, into ``dest`` (paths relative to llama.cpp's root)."""
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            rel = m.name.partition("/")[2]  # drop the sdist's top folder
            if rel.startswith(_VENDOR) and wanted(rel[len(_VENDOR) :]):
                m.name = rel[len(_VENDOR) :]
                tar.extract(m, dest, filter="data")


def locate_converter(cache: Path = CACHE) -> Path:
    """``convert_hf_to_gguf.py`` of :data:`LLAMA_CPP_PYTHON`, fetched into ``cache`` once."""
    script = converter_path(cache)
    if script.is_file():
        return script
    sdist = fetch_sdist(cache)
    staging = Path(tempfile.mkdtemp(prefix=f".{VERSION}-", dir=_mkdir(cache)))
    _extract(sdist, staging, lambda rel: rel.startswith(_CONVERTER_MEMBERS))
    staging.rename(script.parent)  # whole or not at all
    return script


def missing_build_tools() -> list[str]:
    """What of :data:`BUILD_TOOLS` is not on PATH (a set ``CC``/``CXX`` must name a
    program that is)."""
    missing = []
    for what, env, names in BUILD_TOOLS:
        given = os.environ.get(env or "", "").split()
        if not any(shutil.which(n) for n in (given[:1] or names)):
            missing.append(what)
    return missing


def require_build_tools(why: str) -> None:
    """Raise :class:`InputError` naming what is missing to build llama-quantize."""
    missing = missing_build_tools()
    if missing:
        raise InputError(
            "gti.deploy",
            f"{why} needs llama.cpp's {QUANTIZER}, built once from {LLAMA_CPP_PYTHON}'s "
            f"sources with cmake and a C/C++ compiler (missing: {', '.join(missing)}): install "
            "them (Debian/Ubuntu: apt-get install cmake g++ ninja-build), or choose a type "
            "that needs no build",
        )


def locate_quantizer(cache: Path = CACHE, why: str = "a K-quant") -> Path:
    """``llama-quantize``, built into ``cache`` once (minutes; the build tools are checked
    before the sdist is fetched)."""
    binary = quantizer_path(cache)
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    require_build_tools(why)
    build_quantizer(fetch_sdist(cache), binary)
    return binary


def build_quantizer(sdist: Path, binary: Path, jobs: int | None = None) -> Path:
    """cmake-configure llama.cpp from ``sdist`` in a scratch folder beside ``binary``,
    build the ``llama-quantize`` target only, and publish the binary at ``binary``."""
    jobs = jobs or len(os.sched_getaffinity(0))
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llama-build-", dir=_mkdir(binary.parent.parent)) as t:
        src, build, staging = Path(t) / "src", Path(t) / "build", Path(t) / "bin"
        print(f"building {QUANTIZER} from {sdist.name} (once, a few minutes)", file=sys.stderr)
        _extract(sdist, src, lambda rel: not rel.startswith(_NOT_BUILT))
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        _run(["cmake", "-S", str(src), "-B", str(build), *generator, *CMAKE_OPTIONS])
        _run(["cmake", "--build", str(build), "--target", QUANTIZER, "-j", str(jobs)])
        built = build / "bin" / QUANTIZER
        if not built.is_file():
            raise InputError(build, f"the build finished without bin/{QUANTIZER}")
        staging.mkdir()
        shutil.copy2(built, staging / QUANTIZER)
        shutil.rmtree(binary.parent, ignore_errors=True)  # a folder left without the binary
        staging.rename(binary.parent)  # whole or not at all
    print(f"built {binary} in {time.monotonic() - start:.0f} s", file=sys.stderr)
    return binary


def _run(cmd: list[str]) -> None:
    """Run a build step, its output passed on to stderr line by line (the progress of a
    build of minutes); a failure names the step and quotes its last lines."""
    tail: collections.deque[str] = collections.deque(maxlen=5)
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        for line in proc.stdout:
            tail.append(line.rstrip())
            print(line, end="", file=sys.stderr)
    if proc.returncode != 0:
        shown = " | ".join(tail) or "no output"
        raise InputError(" ".join(cmd[:2]), f"failed (exit {proc.returncode}): {shown}")


def quantize(src: Path, dst: Path, qtype: str, binary: Path, threads: int | None = None) -> Path:
    """``llama-quantize SRC DST QTYPE THREADS``: llama.cpp's own mix of types per tensor
    for ``qtype`` (``Q4_K_M``: most weights Q4_K, some Q6_K; a tensor whose rows are not
    whole 256-wide K blocks falls back to a legacy type, as llama.cpp decides)."""
    threads = threads or len(os.sched_getaffinity(0))
    cmd = [str(binary), str(src), str(dst), qtype.upper(), str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines() or ["no output"]
        raise InputError(src, f"{QUANTIZER} {qtype.upper()} failed: {lines[-1]}")
    return dst


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p
