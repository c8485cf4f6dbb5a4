"""objstore-payload: per-token rollout side arrays through object storage.

The core (this package) depends on numpy, msgspec and fsspec only; it never imports
torch or vllm. Adapters for neighbouring systems live in `objstore_payload.adapters`,
retention in `objstore_payload.lifecycle`, the command line in `objstore_payload.cli`.
"""

from objstore_payload.errors import (
    BlobFormatError,
    BlobTooLargeError,
    ChecksumMismatchError,
    InlineDecodeError,
    InvalidPayloadError,
    InvalidSegmentError,
    PayloadError,
    PayloadNotFoundError,
    ShortReadError,
    StoreConfigError,
    StoreIOError,
    UnknownFieldError,
    UriNotAllowedError,
)
from objstore_payload.fields import FIELDS, FieldSpec, get_field
from objstore_payload.reader import FieldWindow, PayloadReader
from objstore_payload.segment import Segment, clip_segments, shift_segments
from objstore_payload.store import S3Options, Store, StoreConfig, open_store
from objstore_payload.writer import PayloadWriter, RequestArrays

__version__ = "0.1.0"

__all__ = [
    "FIELDS",
    "BlobFormatError",
    "BlobTooLargeError",
    "ChecksumMismatchError",
    "FieldSpec",
    "FieldWindow",
    "InlineDecodeError",
    "InvalidPayloadError",
    "InvalidSegmentError",
    "PayloadError",
    "PayloadNotFoundError",
    "PayloadReader",
    "PayloadWriter",
    "RequestArrays",
    "S3Options",
    "Segment",
    "ShortReadError",
    "Store",
    "StoreConfig",
    "StoreConfigError",
    "StoreIOError",
    "UnknownFieldError",
    "UriNotAllowedError",
    "clip_segments",
    "get_field",
    "open_store",
    "shift_segments",
]
