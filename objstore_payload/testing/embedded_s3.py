"""An embedded S3 server for demos and tests: moto's server on 127.0.0.1, free port.

By default it runs in a thread of the calling process; ``separate_process=True`` runs it
as a child process instead (stopped by PID), so that its memory (it keeps every object)
and its CPU (it is Python too) are not counted as the client's, as benchmarks need. It
speaks real HTTP, so s3fs, boto3 and any other client reach it exactly as they reach AWS.
It needs the ``embedded`` extra (``moto[server]``).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from objstore_payload.store.config import S3Options
from objstore_payload.testing.loopback import create_bucket, loopback_s3_options

__all__ = ["EmbeddedS3"]

_ACCESS_KEY = "embedded"
_SECRET_KEY = "embedded-secret"


class EmbeddedS3:
    """``with EmbeddedS3() as s3: ...``: a throwaway S3 endpoint with ``bucket`` created."""

    def __init__(
        self,
        bucket: str = "payloads",
        *,
        separate_process: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``env``: extra environment for a separate process (moto settings such as
        ``INITIAL_NO_AUTH_ACTION_COUNT``, which turns IAM enforcement on)."""
        if env and not separate_process:
            raise ValueError("env applies to a server in a separate process only")
        self.bucket = bucket
        self.endpoint_url = ""
        self._server: Any = None
        self._separate = separate_process
        self._env = dict(env or {})
        self._process: subprocess.Popen[bytes] | None = None

    def _start_process(self) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env={**os.environ, **self._env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the embedded S3 server process did not start") from None
                time.sleep(0.05)
        self.endpoint_url = f"http://127.0.0.1:{port}"

    def start(self) -> Self:
        """Start the server and create the bucket."""
        if self._separate:
            self._start_process()
            create_bucket(self.s3_options(), self.bucket)
            return self
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:
            raise RuntimeError(
                "the embedded S3 server needs moto: pip install 'objstore-payload[embedded]'"
            ) from exc
        # werkzeug logs every request at INFO; a demo or test run has no use for that.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        _host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://127.0.0.1:{port}"
        create_bucket(self.s3_options(), self.bucket)
        return self

    def s3_options(self, **overrides: Any) -> S3Options:
        """Options that reach this server (path-style, its own static credentials)."""
        return loopback_s3_options(self.endpoint_url, _ACCESS_KEY, _SECRET_KEY, **overrides)

    def ensure_bucket(self) -> None:
        """Create the bucket again if something removed it (moto's in-process mock shares
        its backend with a server running in the same process, and resets it)."""
        create_bucket(self.s3_options(), self.bucket, if_missing=True)

    def reset(self) -> None:
        """Drop every bucket and object, then create the bucket again."""
        import urllib.request

        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass
        create_bucket(self.s3_options(), self.bucket)

    def stop(self) -> None:
        """Stop the server (its thread ends, or its process is stopped by PID; objects
        are gone)."""
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
            self._process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
