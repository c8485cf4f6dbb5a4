"""A fault-injecting HTTP proxy for S3 on loopback, for the fault-matrix tests.

`FaultProxy` listens on 127.0.0.1 (free port) and forwards every request to an upstream S3
server (moto server, Ceph RGW), unless a queued `Fault` matches the request: then it
answers with that fault instead of (or on top of) the upstream answer. Faults are matched
by operation (``put``: PUT of an object, ``get``: GET of an object, ``delete``: a
DeleteObjects POST or a DELETE) and spent in order, ``times`` times each, so a test can
say "the next two GETs fail with a 503, then serve normally".

Fault kinds:

- ``short``: GET: the upstream body cut to half, sent with a matching Content-Length (a
  server that returned fewer bytes than asked); PUT: half the body forwarded upstream with
  a matching Content-Length (a truncated upload the server may accept);
- ``cut``: GET: the upstream headers, then half the body, then the connection reset (a
  body cut off mid-stream: Content-Length promises more than arrives); PUT: the
  connection reset halfway through the request body;
- ``slowdown``: 503 SlowDown; ``internal``: 500 InternalError; ``missing``: 404 NoSuchKey;
- ``reset``: the connection reset (RST) before any answer;
- ``timeout``: no answer for ``delay_s`` seconds, then the connection closed;
- ``stall``: PUT: half the request body is read, then nothing for ``delay_s`` seconds,
  then the rest (a slow upload, to kill its writer in the middle).

A request whose body stops arriving (its client died) is never forwarded.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import ClassVar, Literal, Self
from urllib.parse import urlsplit

__all__ = ["Fault", "FaultKind", "FaultProxy", "Operation"]

FaultKind = Literal["short", "cut", "slowdown", "internal", "missing", "reset", "timeout", "stall"]
Operation = Literal["put", "get", "delete"]

_ERRORS = {
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "internal": (500, "InternalError", "We encountered an internal error. Please try again."),
    "missing": (404, "NoSuchKey", "The specified key does not exist."),
}


@dataclass
class Fault:
    """Answer the next ``times`` requests of ``operation`` with ``kind``."""

    operation: Operation
    kind: FaultKind
    times: int = 1
    delay_s: float = 5.0


def _operation(method: str, path: str) -> Operation | None:
    query = urlsplit(path).query
    key = urlsplit(path).path.strip("/").partition("/")[2]
    if method == "POST" and "delete" in query.split("&"):
        return "delete"
    if method == "DELETE" and key:
        return "delete"
    if method == "PUT" and key and not query:
        return "put"
    if method == "GET" and key and "list-type" not in query:
        return "get"
    return None


class FaultProxy:
    """``with FaultProxy(upstream_url) as proxy: ...``; ``proxy.endpoint_url`` is the
    address clients use; `inject` queues faults; `hits` counts faults served."""

    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self.hits: list[tuple[Operation, FaultKind, str]] = []
        self.requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(_Handler):
            owner: ClassVar[FaultProxy] = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def inject(self, *faults: Fault) -> None:
        """Queue faults (spent in order, per operation)."""
        with self._lock:
            self._faults.extend(faults)

    def clear(self) -> None:
        """Drop queued faults and the logs."""
        with self._lock:
            self._faults.clear()
            self.hits.clear()
            self.requests.clear()

    def pending(self) -> int:
        """Faults still queued (counting each remaining time)."""
        with self._lock:
            return sum(f.times for f in self._faults)

    def _take(self, operation: Operation | None, path: str) -> Fault | None:
        with self._lock:
            if operation is None:
                return None
            for fault in self._faults:
                if fault.operation == operation:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    self.hits.append((operation, fault.kind, path))
                    return fault
        return None

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    owner: ClassVar[FaultProxy]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _relay(self) -> None:
        operation = _operation(self.command, self.path)
        with self.owner._lock:
            self.owner.requests.append((self.command, self.path))
        fault = self.owner._take(operation, self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if fault is not None and fault.kind == "cut" and operation == "put":
            self.rfile.read(length // 2)  # the upload dies halfway through its body
            self._abort()
            return
        if fault is not None and fault.kind == "stall" and operation == "put":
            first_half = self.rfile.read(length // 2)
            time.sleep(fault.delay_s)
            body = first_half + self.rfile.read(length - len(first_half))
        else:
            body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the client went away mid-upload: forward nothing
            self._abort()
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        if fault is not None and fault.kind == "short" and operation == "put":
            # Half the body reaches the server, with a Content-Length that matches it.
            body = body[: len(body) // 2]
            headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
            headers["Content-Length"] = str(len(body))
        if fault is not None and fault.kind in ("reset", "timeout"):
            if fault.kind == "timeout":
                time.sleep(fault.delay_s)
            self._abort()
            return
        if fault is not None and fault.kind in _ERRORS:
            status, code, message = _ERRORS[fault.kind]
            self._error(status, code, message)
            return
        connection = http.client.HTTPConnection(*self.owner.upstream, timeout=60)
        try:
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            upstream_headers = response.getheaders()
            status = response.status
        finally:
            connection.close()
        if fault is not None and fault.kind == "short" and operation == "get":
            data = data[: len(data) // 2]
        self.send_response(status)
        head = self.command == "HEAD"  # its Content-Length describes a body never sent
        for name, value in upstream_headers:
            skip = (
                ("connection", "transfer-encoding")
                if head
                else ("content-length", "connection", "transfer-encoding")
            )
            if name.lower() not in skip:
                self.send_header(name, value)
        if not head:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if fault is not None and fault.kind == "cut":
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self._abort()
            return
        self.wfile.write(data)

    def _error(self, status: int, code: str, message: str) -> None:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>{message}</Message><RequestId>fault</RequestId></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _abort(self) -> None:
        """Close the connection with a reset (SO_LINGER 0) instead of a clean FIN."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay
