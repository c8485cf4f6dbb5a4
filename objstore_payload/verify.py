"""Reading a blob's trailer and verifying its region checksums.

Window reads never need this; ``objstore-payload inspect`` and verification do.
"""

from __future__ import annotations

from dataclasses import dataclass

from objstore_payload.errors import BlobFormatError
from objstore_payload.layout import (
    FOOTER_SIZE,
    RegionEntry,
    Trailer,
    crc32c,
    parse_footer,
    parse_trailer,
)
from objstore_payload.store.store import Store

__all__ = ["BlobInfo", "RegionCheck", "read_blob_info", "verify_blob"]


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """A blob's size and decoded trailer."""

    uri: str
    size: int
    trailer: Trailer


@dataclass(frozen=True, slots=True)
class RegionCheck:
    """The outcome of checking one region's CRC32C."""

    region: RegionEntry
    actual_crc32c: int

    @property
    def ok(self) -> bool:
        """True when the stored bytes match the trailer's checksum."""
        return self.actual_crc32c == self.region.crc32c


def read_blob_info(store: Store, uri: str) -> BlobInfo:
    """Size and trailer of the blob at ``uri`` (a HEAD and two ranged reads)."""
    size = store.size(uri)
    if size < FOOTER_SIZE:
        raise BlobFormatError(f"{uri}: object of {size} bytes is too small to be a blob")
    footer = bytes(store.read(uri, size - FOOTER_SIZE, size))
    start, length = parse_footer(footer, size, uri)
    trailer = parse_trailer(bytes(store.read(uri, start, start + length)), footer, uri)
    regions_end = max((r.offset + r.nbytes for r in trailer.regions), default=0)
    if regions_end > start:
        raise BlobFormatError(f"{uri}: trailer describes regions past its own start")
    return BlobInfo(uri=uri, size=size, trailer=trailer)


def verify_blob(store: Store, uri: str) -> tuple[BlobInfo, list[RegionCheck]]:
    """Read every region of the blob and compare its CRC32C with the trailer's."""
    info = read_blob_info(store, uri)
    regions = info.trailer.regions
    buffers = store.read_ranges([(uri, r.offset, r.offset + r.nbytes) for r in regions])
    checks = [
        RegionCheck(region=r, actual_crc32c=crc32c(buf))
        for r, buf in zip(regions, buffers, strict=True)
    ]
    return info, checks
