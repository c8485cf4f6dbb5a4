"""What every scenario gets from the command line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from objstore_payload.bench.report import Progress
from objstore_payload.store.config import S3Options

__all__ = ["BenchContext"]


@dataclass
class BenchContext:
    """Options shared by the scenarios."""

    scale: float = 1.0
    """1.0 is the full-size scenario; the test command's smoke runs use tiny scales."""
    store: str | None = None
    """Root URL to run on instead of each scenario's default store."""
    engine: str = "auto"
    s3: S3Options = field(default_factory=S3Options)
    repeats: int = 5
    with_s3: bool = True
    """read: also measure on the embedded S3 server (and on Ceph RGW when it can run)."""
    rgw_script: Path | None = None
    """read: ``scripts/ceph-rgw.sh`` of a checkout, to start Ceph RGW when installed."""
    quiet: bool = False

    def progress(self, label: str, total: int) -> Progress:
        """A progress bar for a long phase."""
        return Progress(label, total, quiet=self.quiet)
