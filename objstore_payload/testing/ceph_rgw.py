"""A throwaway Ceph RGW for tests: started by ``scripts/ceph-rgw.sh`` (Debian packages
``ceph-mon ceph-osd radosgw``), on 127.0.0.1 and free ports, stopped by PID."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from objstore_payload.store.config import S3Options

__all__ = ["CephRgw", "rgw_available"]

ACCESS_KEY = "testkey"
SECRET_KEY = "testsecret"


def rgw_available() -> str | None:
    """None when Ceph RGW can run here, else why not (one line)."""
    missing = [
        b for b in ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin") if shutil.which(b) is None
    ]
    if missing:
        return (
            f"Ceph RGW is not installed ({', '.join(missing)} missing; scripts/test.sh installs "
            "ceph-mon ceph-osd radosgw with apt when run as root)"
        )
    return None


class CephRgw:
    """``with CephRgw(script, directory) as rgw: ...``; ``rgw.endpoint_url`` once started."""

    def __init__(self, script: Path, directory: Path, bucket: str = "payloads") -> None:
        self.script = script
        self.directory = directory
        self.bucket = bucket
        self.endpoint_url = ""

    def start(self) -> Self:
        """Start mon, OSD and RGW (about 12 s) and create the bucket."""
        try:
            result = subprocess.run(
                ["bash", str(self.script), "up", str(self.directory)],
                capture_output=True,
                text=True,
                timeout=180,
                check=True,
            )
        except subprocess.SubprocessError as exc:
            self.stop()
            output = getattr(exc, "stderr", "") or ""
            raise RuntimeError(f"Ceph RGW did not start: {exc}\n{output[-2000:]}") from exc
        lines = [line for line in result.stdout.splitlines() if line.startswith("endpoint=")]
        self.endpoint_url = lines[-1].removeprefix("endpoint=")
        from objstore_payload.store.s3 import make_boto3_client

        client = make_boto3_client(self.s3_options())
        try:
            client.create_bucket(Bucket=self.bucket)
        finally:
            client.close()
        return self

    def s3_options(self, **overrides: Any) -> S3Options:
        """Options that reach this RGW (path-style, its test user)."""
        values: dict[str, Any] = {
            "endpoint_url": self.endpoint_url,
            "addressing_style": "path",
            "region": "us-east-1",
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
        }
        values.update(overrides)
        return S3Options(**values)

    def process_lifecycle(self) -> None:
        """Run lifecycle processing now (with the 10-second debug "day")."""
        subprocess.run(
            ["bash", str(self.script), "lc", str(self.directory)],
            capture_output=True,
            timeout=120,
            check=True,
        )

    def stop(self) -> None:
        """Stop every daemon this instance started, by PID."""
        subprocess.run(
            ["bash", str(self.script), "down", str(self.directory)],
            capture_output=True,
            timeout=60,
            check=False,
        )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
