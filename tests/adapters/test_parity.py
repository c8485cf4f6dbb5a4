"""The heart of the trainer path: by-segment tensors equal the inline tensors, bit for bit.

Random batches of samples (routing, masks, mask logprobs; uint8 and uint16 routing; empty
masks; samples truncated before any completion token) go inline and by segments (routing
split across two blobs, masks split into several segments of different widths) through
truncation, packing, padding, 2 DP ranks and CP 1, 2, 4 and 8, on memory, file and moto
server stores. Every rank's tensors must be equal, dtype and bytes.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from objstore_payload import PayloadReader, Store, StoreConfig  # noqa: E402
from objstore_payload.adapters.rollout import prepare_batch  # noqa: E402
from objstore_payload.adapters.torch_tensors import (  # noqa: E402
    micro_batch_tensors,
    window_for_rank,
)
from tests.adapters.helpers import SampleArrays  # noqa: E402

CP_DEGREES = (1, 2, 4, 8)
DP_SIZE = 2
EXAMPLES = {"memory": 40, "file": 40, "moto-server": 12}
CASES = itertools.count()


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[SampleArrays], int]:
    layers, top_k = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([np.uint8, np.uint16]))
    high = 256 if dtype == np.uint8 else 65536
    with_routing = draw(st.booleans())
    samples = []
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(2, 40))
        prompt = draw(st.integers(1, n - 1))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        token_ids = rng.integers(0, 1000, n, dtype=np.int32)
        loss_mask = np.zeros(n, np.uint8)
        loss_mask[prompt:] = 1
        routing = None
        if with_routing:
            routing = rng.integers(0, high, (n, layers, top_k)).astype(dtype)
            routing[-1] = routing[-2]  # the final position repeats the previous row
        counts = ids = logprobs = None
        mask_kind = draw(st.sampled_from(["none", "empty", "some", "some"]))
        if mask_kind != "none":
            counts = np.zeros(n, np.int32)
            if mask_kind == "some":
                counts[prompt:] = rng.integers(0, 6, n - prompt)
            ids = rng.integers(0, 50_000, int(counts.sum()), dtype=np.int32)
            if draw(st.booleans()):
                logprobs = -rng.exponential(3.0, ids.size).astype(np.float32)
                logprobs[rng.random(ids.size) < 0.1] = -np.inf
        cuts = tuple(sorted(draw(st.lists(st.integers(0, n), max_size=3))))
        samples.append(
            SampleArrays(
                token_ids, loss_mask, routing, counts, ids, logprobs, draw(st.integers(0, n)), cuts
            )
        )
    seq_len = draw(st.integers(8, 48))
    return samples, seq_len


@pytest.fixture(scope="module", params=list(EXAMPLES))
def store_kind(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Store]]:
    kind = request.param
    if kind == "memory":
        with Store(StoreConfig(root=f"memory://parity-{uuid.uuid4().hex}")) as store:
            yield kind, store
    elif kind == "file":
        root: Path = tmp_path_factory.mktemp("parity")
        with Store(StoreConfig(root=root.as_uri())) as store:
            yield kind, store
    else:
        server = request.getfixturevalue("embedded_s3")
        server.ensure_bucket()
        config = StoreConfig(root=f"s3://{server.bucket}/parity", s3=server.s3_options())
        with Store(config) as store:
            yield kind, store


def assert_same(got: torch.Tensor | None, want: torch.Tensor | None, what: str) -> None:
    if want is None:
        assert got is None, what
        return
    assert got is not None, what
    assert got.dtype == want.dtype, what
    assert got.shape == want.shape, f"{what}: {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.numpy().tobytes() == want.numpy().tobytes(), what


RAGGED = {"sampling_mask": -1, "sampling_mask_logprobs": float("-inf")}


def assert_same_up_to_width(got: torch.Tensor | None, want: torch.Tensor | None, what: str) -> None:
    """``mask_width="window"``: a ragged tensor is the inline one cut to the widest row of
    the window (every cut column all fill); other tensors are bit for bit the same."""
    name = what.rsplit(" ", 1)[-1]
    if name not in RAGGED or want is None or got is None:
        assert_same(got, want, what)
        return
    width = got.shape[1]
    assert width <= want.shape[1], what
    assert_same(got, want[:, :width].contiguous(), what)
    assert bool((want[:, width:] == RAGGED[name]).all()), what
    if name == "sampling_mask":
        widest = int((want != -1).sum(dim=1).max()) if want.shape[0] else 0
        assert width == max(widest, 1), what


def test_by_segment_tensors_equal_inline(store_kind: tuple[str, Store]) -> None:
    kind, store = store_kind
    reader = PayloadReader(store)

    @settings(max_examples=EXAMPLES[kind])
    @given(batches())
    def check(batch: tuple[list[SampleArrays], int]) -> None:
        arrays, seq_len = batch
        destination = store.version_prefix(next(CASES))
        inline = [a.inline() for a in arrays]
        by_segments = [a.by_segments(store, destination) for a in arrays]
        for cp in CP_DEGREES:
            inline_ranks = prepare_batch(
                inline, seq_len=seq_len, dp_size=DP_SIZE, pad_to_multiple_of=cp
            )
            segment_ranks = prepare_batch(
                by_segments, seq_len=seq_len, dp_size=DP_SIZE, pad_to_multiple_of=cp
            )
            assert [len(r) for r in inline_ranks] == [len(r) for r in segment_ranks]
            for dp_rank, (inline_mbs, segment_mbs) in enumerate(
                zip(inline_ranks, segment_ranks, strict=True)
            ):
                for i, (a, b) in enumerate(zip(inline_mbs, segment_mbs, strict=True)):
                    assert a.input_ids == b.input_ids
                    assert a.loss_mask == b.loss_mask
                    assert a.dummy == b.dummy
                    assert a.num_tokens % cp == 0
                    for cp_rank in range(cp):
                        want = window_for_rank(micro_batch_tensors(a), cp_rank, cp)
                        exact = micro_batch_tensors(b, cp_rank=cp_rank, cp_size=cp, reader=reader)
                        trimmed = micro_batch_tensors(
                            b, cp_rank=cp_rank, cp_size=cp, reader=reader, mask_width="window"
                        )
                        assert exact.cp_windowed
                        assert trimmed.cp_windowed
                        where = f"{kind} cp={cp} dp={dp_rank} mb={i} rank={cp_rank}"
                        for name, tensor in want.as_dict().items():
                            assert_same(exact.as_dict()[name], tensor, f"{where} {name}")
                            assert_same_up_to_width(
                                trimmed.as_dict()[name], tensor, f"{where} {name}"
                            )

    check()


def test_sample_truncated_before_its_completion_keeps_a_width_1_mask(
    store_kind: tuple[str, Store],
) -> None:
    kind, store = store_kind
    n, prompt = 12, 9
    counts = np.zeros(n, np.int32)
    counts[prompt:] = [3, 1, 2]
    arrays = SampleArrays(
        token_ids=np.arange(n, dtype=np.int32),
        loss_mask=(np.arange(n) >= prompt).astype(np.uint8),
        routing=np.ones((n, 2, 2), np.uint8),
        counts=counts,
        ids=np.arange(6, dtype=np.int32),
        logprobs=np.linspace(-1, 0, 6, dtype=np.float32),
        routing_cut=5,
        mask_cuts=(10,),
    )
    destination = store.version_prefix(next(CASES))
    for cp in CP_DEGREES:
        (inline_mb,), _ = prepare_batch(
            [arrays.inline()], seq_len=8, dp_size=DP_SIZE, pad_to_multiple_of=cp
        )
        (segment_mb,), _ = prepare_batch(
            [arrays.by_segments(store, destination)],
            seq_len=8,
            dp_size=DP_SIZE,
            pad_to_multiple_of=cp,
        )
        for cp_rank in range(cp):
            want = window_for_rank(micro_batch_tensors(inline_mb), cp_rank, cp)
            got = micro_batch_tensors(
                segment_mb, cp_rank=cp_rank, cp_size=cp, reader=PayloadReader(store)
            )
            assert want.sampling_mask is not None
            assert want.sampling_mask.shape[1] == 1
            assert bool((want.sampling_mask == -1).all())
            for name, tensor in want.as_dict().items():
                assert_same(got.as_dict()[name], tensor, f"{kind} cp={cp} rank={cp_rank} {name}")
