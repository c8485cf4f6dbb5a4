"""Storage: a root URL, an engine behind one small interface, and the shared rules
(URI checks, range merging, retries, durable writes, counters)."""

from objstore_payload.store.coalesce import Block, CoalescePolicy
from objstore_payload.store.config import ReadOptions, RetryPolicy, S3Options, StoreConfig
from objstore_payload.store.engine import DeleteOutcome, Engine
from objstore_payload.store.root import StoreRoot
from objstore_payload.store.store import (
    DeleteReport,
    RequestRecord,
    Store,
    StoreStats,
    open_store,
)

__all__ = [
    "Block",
    "CoalescePolicy",
    "DeleteOutcome",
    "DeleteReport",
    "Engine",
    "ReadOptions",
    "RequestRecord",
    "RetryPolicy",
    "S3Options",
    "Store",
    "StoreConfig",
    "StoreRoot",
    "StoreStats",
    "open_store",
]
