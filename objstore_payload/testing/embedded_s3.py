"""An embedded S3 server for demos and tests: moto's server on 127.0.0.1, free port.

It runs in a thread of the calling process and keeps objects in memory; it speaks real
HTTP, so s3fs, boto3 and any other client reach it exactly as they reach AWS. It needs
the ``embedded`` extra (``moto[server]``).
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any, Self

from objstore_payload.store.config import S3Options
from objstore_payload.testing.loopback import create_bucket, loopback_s3_options

__all__ = ["EmbeddedS3"]

_ACCESS_KEY = "embedded"
_SECRET_KEY = "embedded-secret"


class EmbeddedS3:
    """``with EmbeddedS3() as s3: ...``: a throwaway S3 endpoint with ``bucket`` created."""

    def __init__(self, bucket: str = "payloads") -> None:
        self.bucket = bucket
        self.endpoint_url = ""
        self._server: Any = None

    def start(self) -> Self:
        """Start the server and create the bucket."""
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
        """Stop the server (its thread ends; objects are gone)."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
