"""The writer's view of one request: positions, dtypes, and refused input."""

from __future__ import annotations

import numpy as np
import pytest

from objstore_payload import InvalidPayloadError, PayloadWriter, RequestArrays, Store, StoreConfig
from objstore_payload.writer import compact_routing, routing_start


def test_routing_is_end_anchored() -> None:
    assert routing_start(prompt_len=4, completion_len=3, rows=4) == 2
    assert routing_start(prompt_len=4, completion_len=3, rows=6) == 0
    # a P/D decode instance emits rows only from its first forward
    assert routing_start(prompt_len=4, completion_len=3, rows=3) == 3
    with pytest.raises(InvalidPayloadError, match="do not fit"):
        routing_start(prompt_len=4, completion_len=3, rows=7)


def test_compact_routing_picks_the_narrowest_dtype() -> None:
    rows = np.arange(24, dtype=np.int64).reshape(4, 2, 3)
    assert compact_routing(rows).dtype == np.uint8
    assert compact_routing(rows, num_experts=512).dtype == np.uint16
    assert compact_routing(rows * 20).dtype == np.uint16
    np.testing.assert_array_equal(compact_routing(rows * 20), rows * 20)


@pytest.mark.parametrize(
    ("rows", "num_experts", "message"),
    [
        (np.zeros((2, 3)), None, "layers, top_k"),
        (np.zeros((2, 3, 1), np.float32), None, "integer"),
        (np.full((2, 3, 1), -1), None, "lie in"),
        (np.full((2, 3, 1), 70_000), None, "lie in"),
        (np.full((2, 3, 1), 8), 8, "num_experts"),
    ],
)
def test_compact_routing_refuses(rows: np.ndarray, num_experts: int | None, message: str) -> None:
    with pytest.raises(InvalidPayloadError, match=message):
        compact_routing(rows, num_experts)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt_len": -1}, "prompt_len"),
        ({"completion_len": 2.0}, "completion_len"),
        ({"sampling_mask": (np.array([1, 1]), np.array([1, 2]))}, "one count per completion token"),
        ({"sampling_mask_logprobs": np.zeros(3, np.float32)}, "needs the sampling_mask"),
        (
            {
                "sampling_mask": (np.array([1, 1, 1]), np.arange(3)),
                "sampling_mask_logprobs": np.zeros(2, np.float32),
            },
            "add up to 3 but there are 2",
        ),
        ({"routed_expert_weights": np.zeros((4, 2, 3), np.float64)}, "float32"),
        (
            {
                "routed_experts": np.zeros((4, 2, 3), np.uint8),
                "routed_expert_weights": np.zeros((3, 2, 3), np.float32),
            },
            "3 rows, routing has 4",
        ),
    ],
)
def test_bad_request_arrays_are_refused_before_writing(
    kwargs: dict[str, object], message: str
) -> None:
    store = Store(StoreConfig(root="memory://writer-refusals"), record_requests=True)
    values: dict[str, object] = {"prompt_len": 4, "completion_len": 3}
    values.update(kwargs)
    with pytest.raises(InvalidPayloadError, match=message):
        PayloadWriter(store).write(store.root.url, RequestArrays(**values))  # type: ignore[arg-type]
    assert store.requests == []


def test_nothing_to_write_writes_nothing() -> None:
    store = Store(StoreConfig(root="memory://writer-empty"), record_requests=True)
    assert (
        PayloadWriter(store).write(store.root.url, RequestArrays(prompt_len=3, completion_len=1))
        == []
    )
    assert store.requests == []
