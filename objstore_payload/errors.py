"""The package's error hierarchy.

Every error the package raises on bad input or failed I/O derives from `PayloadError`
and from the builtin a caller would naturally catch (`ValueError` for bad data,
`PermissionError` for a URI outside the configured roots, `FileNotFoundError` for a
missing blob, `OSError` for I/O), so ``except ValueError`` keeps working for callers
that do not know this package. The library error that caused one is kept as
``__cause__`` (raise ... from ...).
"""

from __future__ import annotations

__all__ = [
    "BlobFormatError",
    "BlobTooLargeError",
    "ChecksumMismatchError",
    "InlineDecodeError",
    "InvalidPayloadError",
    "InvalidSegmentError",
    "PayloadError",
    "PayloadNotFoundError",
    "ShortReadError",
    "StoreConfigError",
    "StoreIOError",
    "UnknownFieldError",
    "UriNotAllowedError",
]


class PayloadError(Exception):
    """Base class of every error raised by objstore-payload."""


class InvalidSegmentError(PayloadError, ValueError):
    """A segment handle is malformed: negative or overflowing numbers, unknown dtype,
    a shape out of bounds, or a byte range past the 4 GiB blob limit."""


class UnknownFieldError(PayloadError, ValueError):
    """A field name that is not in the field table."""


class InvalidPayloadError(PayloadError, ValueError):
    """A producer handed the writer arrays that do not fit together (wrong dtype,
    rows that do not fit the sequence, CSR counts that do not add up)."""


class InlineDecodeError(PayloadError, ValueError):
    """An inline packed array whose shape, dtype, base64 data or byte length disagree."""


class UriNotAllowedError(PayloadError, PermissionError):
    """A URI that is not a plain key under a configured storage root.

    Raised before any I/O: a hostile segment must never make the reader touch
    another scheme, bucket or path.
    """


class StoreConfigError(PayloadError, ValueError):
    """A storage root or storage option that cannot be used."""


class BlobTooLargeError(PayloadError, ValueError):
    """A blob would exceed 4 GiB, the limit of its uint32 CSR offsets."""


class BlobFormatError(PayloadError, ValueError):
    """A blob whose trailer or ragged offsets are corrupt or of an unknown format."""


class ChecksumMismatchError(BlobFormatError):
    """A blob region whose CRC32C does not match the one recorded in its trailer."""


class StoreIOError(PayloadError, OSError):
    """A storage operation failed after the retry budget was spent."""


class PayloadNotFoundError(StoreIOError, FileNotFoundError):
    """The blob a segment points at does not exist (never written, or already collected)."""


class ShortReadError(StoreIOError):
    """Storage returned fewer bytes than a range asked for, after every retry.

    Attributes name what was asked and what came back so that the failing blob can
    be found from the log alone.
    """

    def __init__(self, uri: str, offset: int, expected: int, received: int) -> None:
        super().__init__(
            f"short read from {uri} at offset {offset}: expected {expected} bytes, "
            f"received {received}"
        )
        self.uri = uri
        self.offset = offset
        self.expected = expected
        self.received = received
