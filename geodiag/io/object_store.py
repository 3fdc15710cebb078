"""A checkpoint folder in an S3 bucket, ``s3://BUCKET/PREFIX``, read by byte ranges through
fsspec's s3fs (the ``s3`` extra; imported only when such a URL is read).

Credentials and region come from the usual AWS chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, the shared files, an
instance role); the endpoint from ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (MinIO,
R2, a test server). None of them is ever shown. Files are found by asking for each known
name (``HeadObject``), never by listing, so ``s3:GetObject`` alone is enough: without
``s3:ListBucket`` S3 answers a missing key with AccessDenied, so a small file refused that
way counts as absent, while the weights refused are an error.

Failures are those of ``geodiag.io.byte_ranges``: timeouts, dropped connections and 5xx
answers retried (:data:`~geodiag.io.byte_ranges.RETRIES`, with backoff); a missing key or
bucket, a refusal, missing credentials or an endpoint that cannot be reached one
:class:`InputError` naming the ``s3://`` URL, at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from geodiag.errors import InputError, require_extra
from geodiag.io import byte_ranges

SCHEME = "s3://"
S3_INSTALL = "pip install 'geodiag[s3]'"
S3_MODULES = ("s3fs",)
# The endpoint, first found wins (botocore's own names for it).
ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
NOT_FOUND = {"404", "NoSuchKey", "NoSuchBucket", "NotFound"}
REFUSED = {
    "403",
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AllAccessDisabled",
}


@dataclass
class ObjectFolder:
    """``s3://BUCKET/PREFIX``: the same questions as ``remote.RemoteFolder`` (does a file
    exist, its bytes, a ranged file), asked of the bucket."""

    where: str  # s3://BUCKET/PREFIX, as shown (no trailing slash)
    fs: Any = field(repr=False)  # s3fs.S3FileSystem

    @property
    def _path(self) -> str:
        return self.where[len(SCHEME) :]

    def shown(self, name: str) -> str:
        return f"{self.where}/{name}"

    def exists(self, name: str, required: bool = False) -> bool:
        """``HeadObject``: True if there, False on 404 (and on 403 unless ``required``:
        without ``s3:ListBucket`` a missing key answers 403)."""
        try:
            _call(lambda: self.fs.call_s3("head_object", **self._key(name)), self.shown(name))
            return True
        except _NotFound:
            return False
        except _Refused:
            if required:
                raise
            return False

    def fetch(self, name: str) -> bytes:
        path = f"{self._path}/{name}"
        return _call(lambda: self.fs.cat_file(path), self.shown(name))

    def file(self, name: str) -> ObjectFile:
        return ObjectFile(self, name)

    def _key(self, name: str) -> dict[str, str]:
        bucket, _, prefix = self._path.partition("/")
        return {"Bucket": bucket, "Key": f"{prefix}/{name}" if prefix else name}


class ObjectFile(byte_ranges.RangedFile):
    """One object read by ranges (``cat_file(path, start, end)``: one ranged GetObject)."""

    def __init__(
        self, folder: ObjectFolder, name: str, say: Callable[[str], None] | None = None
    ) -> None:
        super().__init__(folder.shown(name), say)
        self.folder, self.name = folder, name

    def _stat_size(self) -> int:
        key = self.folder._key(self.name)
        head = _call(lambda: self.folder.fs.call_s3("head_object", **key), self.where)
        return int(head["ContentLength"])

    def _fetch(self, offset: int, nbytes: int) -> bytes:
        path = f"{self.folder._path}/{self.name}"
        fs = self.folder.fs
        return _call(lambda: fs.cat_file(path, start=offset, end=offset + nbytes), self.where)


def open_folder(url: str) -> ObjectFolder:
    """``s3://BUCKET[/PREFIX]`` (no trailing slash) -> its folder, on a filesystem that
    fails fast (:func:`filesystem`)."""
    bucket = url[len(SCHEME) :].split("/", 1)[0]
    if not bucket:
        raise InputError(url, "not an S3 URL: expected s3://BUCKET/PREFIX")
    require_extra(url, "s3fs (reading s3:// URLs)", S3_MODULES, S3_INSTALL)
    return ObjectFolder(url, filesystem())


def filesystem() -> Any:
    """An s3fs filesystem on the AWS chain's credentials, the endpoint from the environment,
    a connect timeout, and no retries of its own or botocore's: :func:`_call` retries, as
    ``byte_ranges.request`` does, so a dead endpoint fails once, fast."""
    import s3fs

    endpoint = next((os.environ[k] for k in ENDPOINT_ENV if os.environ.get(k)), None)
    fs = s3fs.S3FileSystem(
        endpoint_url=endpoint,
        skip_instance_cache=True,
        config_kwargs={
            "connect_timeout": byte_ranges.CONNECT_TIMEOUT_S,
            "read_timeout": byte_ranges.CONNECT_TIMEOUT_S * 3,
            "retries": {"max_attempts": 1, "mode": "standard"},
        },
    )
    fs.retries = 1  # a class attribute, not an argument: one try per call
    return fs


class _NotFound(InputError):
    pass


class _Refused(InputError):
    pass


def _call(fn: Callable[[], Any], where: str) -> Any:
    """``fn()``, retried with backoff on a timeout, a dropped connection or a 5xx answer; an
    InputError naming ``where`` on anything else that fails."""
    problem = ""
    for attempt in range(byte_ranges.RETRIES):
        if attempt:
            time.sleep(byte_ranges.BACKOFF_S * 2 ** (attempt - 1))
        try:
            return fn()
        except Exception as e:  # s3fs wraps botocore's errors in OSError kinds: unwrap them
            problem = _classify(e, where)
    raise InputError(where, f"gave up after {byte_ranges.RETRIES} tries: {problem}")


def _classify(e: Exception, where: str) -> str:
    """Raise the InputError ``e`` means, or return the problem if it is worth a retry."""
    from botocore import exceptions as boto

    cause = _client_error(e)
    if cause is not None:
        err = cause.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = int(cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in NOT_FOUND or status == 404:
            raise _NotFound(where, f"not found ({code or 'HTTP 404'})") from None
        if code in REFUSED or status == 403:
            raise _Refused(
                where,
                f"refused ({code or 'HTTP 403'}): the credentials (AWS_ACCESS_KEY_ID, "
                "AWS_PROFILE, ...) may not read it, or it does not exist and they may not "
                "list the bucket",
            ) from None
        if status >= 500 or code in ("SlowDown", "InternalError", "ServiceUnavailable"):
            return f"{code or status}"
        raise InputError(where, f"S3 answered {code or status}: {err.get('Message', '')}") from None
    if isinstance(e, boto.NoCredentialsError):
        raise InputError(
            where,
            "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
            "AWS_PROFILE",
        ) from None
    if isinstance(e, (boto.EndpointConnectionError, boto.ConnectTimeoutError)):
        raise InputError(where, f"cannot connect to the S3 endpoint ({e})") from None
    if isinstance(e, (FileNotFoundError,)):
        raise _NotFound(where, "not found") from None
    if isinstance(e, PermissionError):
        raise _Refused(where, f"refused: {e}") from None
    if isinstance(e, (OSError, boto.BotoCoreError, TimeoutError)):
        return f"{e.__class__.__name__}: {e}"
    raise InputError(where, f"cannot read ({e.__class__.__name__}: {e})") from None


def _client_error(e: BaseException) -> Any:
    from botocore.exceptions import ClientError

    seen = 0
    while e is not None and seen < 5:
        if isinstance(e, ClientError):
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None
