"""A throwaway Ceph RGW for tests: started by ``scripts/ceph-rgw.sh`` (Debian packages
``ceph-mon ceph-osd radosgw``), on 127.0.0.1 and free ports, stopped by PID."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from objstore_payload.store.config import S3Options
from objstore_payload.testing.loopback import create_bucket, loopback_s3_options

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
        create_bucket(self.s3_options(), self.bucket)
        return self

    def s3_options(self, **overrides: Any) -> S3Options:
        """Options that reach this RGW (path-style, its test user)."""
        return loopback_s3_options(self.endpoint_url, ACCESS_KEY, SECRET_KEY, **overrides)

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
