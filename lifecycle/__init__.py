"""Retention: delete-on-consume, per-version prefix collection and bucket lifecycle
rules. Installed as ``objstore_payload.lifecycle``; depends on the core only."""

from objstore_payload.lifecycle.collector import CollectorStats, PayloadCollector
from objstore_payload.lifecycle.ledger import Ledger
from objstore_payload.lifecycle.versions import (
    destination,
    min_fresh_version,
    oldest_kept_version,
    version_of_key,
)

__all__ = [
    "CollectorStats",
    "Ledger",
    "PayloadCollector",
    "destination",
    "min_fresh_version",
    "oldest_kept_version",
    "version_of_key",
]
