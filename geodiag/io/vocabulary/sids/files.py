"""A SID file's bytes before any dialect reads them: its first bytes as the dialects sniff
them (a UTF-8 byte-order mark dropped, a gzip file's decompressed), its text for the JSON
dialects (:func:`open_text`, the same two read through), and why a file is no input at
all: cut short by an interrupted copy (a zip archive without the directory it ends with,
a parquet file without its footer, a JSON map that stops before it closes) or in an
encoding geodiag does not guess (UTF-16). Each cause names the file and where it ends."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import TextIO

from geodiag.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
ZIP_MAGIC = b"PK\x03\x04"
PARQUET_MAGIC = b"PAR1"
# A zip archive ends with its end-of-central-directory record: 22 bytes and a comment of
# at most 65,535; a file whose last that many bytes hold no such record was cut short.
ZIP_END = b"PK\x05\x06"
ZIP_END_SPAN = 22 + 65_535
INTERRUPTED = "cut short (an interrupted copy or download?): copy the file again"


def raw_head(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError as e:
        raise InputError(path, f"cannot read ({e.strerror or e})") from None


def is_gzip(path: Path) -> bool:
    return raw_head(path, 2) == GZIP_MAGIC


def sniffed_head(path: Path, n: int) -> bytes:
    """The first ``n`` bytes of what the file holds: decompressed when it is gzip, without
    a UTF-8 byte-order mark."""
    head = raw_head(path, n)
    if head.startswith(GZIP_MAGIC):
        try:  # as much as the stream gives, whole or cut short (reading it then says so)
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw_head(path, 1 << 16), n)
        except zlib.error:
            return head  # not a gzip stream after all: no dialect's
    return head.removeprefix(UTF8_BOM)


def open_text(path: Path) -> TextIO:
    """The file as UTF-8 text, a byte-order mark dropped, decompressed when it is gzip
    (``*.json.gz``); read it under :func:`reading`."""
    if is_gzip(path):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")


class reading:  # noqa: N801  (a context manager, named as what it wraps)
    """Errors of decoding and decompressing ``path`` as InputErrors naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, e: BaseException | None, tb: object) -> bool:
        if e is None or isinstance(e, InputError):
            return False
        if isinstance(e, UnicodeDecodeError):
            raise InputError(self.path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
        if isinstance(e, EOFError):
            raise InputError(
                self.path, f"a gzip stream that ends before its end marker: {INTERRUPTED}"
            ) from None
        if isinstance(e, gzip.BadGzipFile | zlib.error):
            raise InputError(self.path, f"not a readable gzip file ({e})") from None
        if isinstance(e, OSError):
            raise InputError(self.path, f"cannot read ({e.strerror or e})") from None
        return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as e:
        raise InputError(path, f"cannot read ({e.strerror or e})") from None


def _tail(path: Path, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(max(0, _size(path) - n))
        return f.read()


def problem(path: Path) -> str | None:
    """Why ``path`` is no input whatever its dialect (empty, cut short, UTF-16), or None."""
    size = _size(path)
    if size == 0:
        return "empty (0 bytes)"
    head = raw_head(path, 4)
    if head.startswith(ZIP_MAGIC) and ZIP_END not in _tail(path, ZIP_END_SPAN):
        return (
            f"a zip archive (torch.save, .npz) that ends at byte {size:,} without the "
            f"directory a complete archive ends with: {INTERRUPTED}"
        )
    if head.startswith(PARQUET_MAGIC) and (size < 12 or _tail(path, 4) != PARQUET_MAGIC):
        return (
            f"a parquet file that ends at byte {size:,} without its closing footer "
            f"('PAR1'): {INTERRUPTED}"
        )
    if head.startswith(UTF16_BOMS):
        return "UTF-16 text (its byte-order mark says so): save it as UTF-8"
    return None


def described(path: Path) -> str:
    """What the file is, as far as its first bytes tell, for a refusal: "" or "a gzip
    file whose content is " and the like."""
    return "gzip-compressed, and what it holds is " if is_gzip(path) else ""


def read_json(path: Path) -> object:
    """A whole JSON document (ETEGRec's list), read as :func:`open_text` reads; a document
    that stops before it closes is refused as cut short, saying where it ends."""
    import json

    with reading(path), open_text(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(path, "JSON nested too deeply to parse") from None
    except json.JSONDecodeError as e:
        end = len(text.rstrip())
        if e.pos >= end:
            raise InputError(
                path, f"ends at character {end:,} before its JSON closes: {INTERRUPTED}"
            ) from None
        raise InputError(path, f"not valid JSON ({e.msg} at character {e.pos:,})") from None
