"""A tiny HTTP server for the remote-reading tests: serves a folder with HEAD, GET and
single byte ranges (206 + Content-Range), which ``python -m http.server`` does not, and
logs every request (method, path, status, body bytes sent) as a JSON line.

    python range_server.py ROOT LOG [--prefix /org/name/resolve/main] [--token T]
        [--fail-first N]

Prints the port it listens on (an OS-chosen free one) as its first line of stdout.
``--prefix``: only paths under it are served (the Hub's resolve route); ``--token``: 401
unless ``Authorization: Bearer T``; ``--fail-first N``: the first N requests answer 500.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("log", type=Path)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--token", default=None)
    ap.add_argument("--fail-first", type=int, default=0)
    args = ap.parse_args()
    lock = threading.Lock()
    state = {"failures_left": args.fail_first}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _log(self, status: int, sent: int) -> None:
            entry = {
                "method": self.command,
                "path": self.path,
                "range": self.headers.get("Range"),
                "status": status,
                "bytes": sent,
            }
            with lock, open(args.log, "a") as f:
                f.write(json.dumps(entry) + "\n")

        def _refuse(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self._log(status, 0)

        def _serve(self, body: bool) -> None:
            with lock:
                fail = state["failures_left"] > 0
                state["failures_left"] -= fail
            if fail:
                return self._refuse(500)
            if args.token is not None and self.headers.get("Authorization") != (
                f"Bearer {args.token}"
            ):
                return self._refuse(401)
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            if not path.startswith(args.prefix + "/"):
                return self._refuse(404)
            file = (args.root / path[len(args.prefix) + 1 :]).resolve()
            if args.root.resolve() not in file.parents or not file.is_file():
                return self._refuse(404)
            size = file.stat().st_size
            begin, end, status = 0, size - 1, 200
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
            if m:
                begin = int(m[1])
                end = min(int(m[2]) if m[2] else size - 1, size - 1)
                status = 206
            self.send_response(status)
            self.send_header("Content-Length", str(end - begin + 1))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {begin}-{end}/{size}")
            self.end_headers()
            sent = 0
            if body:
                with open(file, "rb") as f:
                    f.seek(begin)
                    data = f.read(end - begin + 1)
                self.wfile.write(data)
                sent = len(data)
            self._log(status, sent)

        def do_GET(self) -> None:
            self._serve(body=True)

        def do_HEAD(self) -> None:
            self._serve(body=False)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
