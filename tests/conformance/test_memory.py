"""The conformance suite on fsspec's in-process memory filesystem."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from objstore_payload import Store, StoreConfig
from tests.conformance.base import FAST_RETRY, StoreConformance


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self) -> Iterator[Store]:
        config = StoreConfig(root=f"memory://conformance-{uuid.uuid4().hex}", retry=FAST_RETRY)
        with Store(config, record_requests=True) as store:
            yield store
