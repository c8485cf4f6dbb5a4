"""Multi-turn traces to samples, P/D stitching, wire compatibility, memory discipline."""

from __future__ import annotations

import logging
import tracemalloc
from collections.abc import Iterator

import msgspec
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from objstore_payload import (  # noqa: E402
    InvalidPayloadError,
    PayloadReader,
    PayloadWriter,
    RequestArrays,
    Segment,
    Store,
    StoreConfig,
)
from objstore_payload.adapters.rollout import (  # noqa: E402
    MicroBatch,
    Sample,
    decode_micro_batch,
    decode_sample,
    encode_message,
    make_sample,
    pack,
    prepare_batch,
)
from objstore_payload.adapters.torch_tensors import (  # noqa: E402
    cp_bounds,
    micro_batch_tensors,
    window_for_rank,
)
from objstore_payload.adapters.traces import Turn, stitch_prefill_decode, trace_to_samples  # noqa: E402
from objstore_payload.codec import PackedArray, encode_array  # noqa: E402
from objstore_payload.store import ReadOptions  # noqa: E402

LAYERS, TOP_K = 3, 2


@pytest.fixture
def store() -> Iterator[Store]:
    with Store(StoreConfig(root="memory://traces", read=ReadOptions(coalesce_gap=0))) as s:
        yield s


def conversation(seed: int, turns: int = 3) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray]:
    """Token ids of a whole conversation, each turn's (prompt_len, completion_len), and
    the routing a model would produce for every forwarded position."""
    rng = np.random.default_rng(seed)
    lengths, total = [], 0
    for _ in range(turns):
        prompt = total + int(rng.integers(3, 8))
        completion = int(rng.integers(2, 6))
        lengths.append((prompt, completion))
        total = prompt + completion
    tokens = rng.integers(0, 1000, total, dtype=np.int32)
    routing = rng.integers(0, 200, (total, LAYERS, TOP_K)).astype(np.uint8)
    return tokens, lengths, routing


def make_turns(
    seed: int, store: Store | None, *, drop_first_row_of_turn: int | None = None
) -> tuple[list[Turn], np.ndarray, np.ndarray]:
    tokens, lengths, routing = conversation(seed)
    rng = np.random.default_rng(seed + 1)
    turns, previous_end = [], 0
    for index, (prompt, completion) in enumerate(lengths):
        start = max(previous_end - 1, 0)  # routed_experts_prompt_start
        if index == drop_first_row_of_turn:
            start += 1
        rows = routing[start : prompt + completion - 1]
        counts = rng.integers(0, 4, completion).astype(np.int32)
        ids = rng.integers(0, 5000, int(counts.sum()), dtype=np.int32)
        logprobs = -rng.random(ids.size).astype(np.float32)
        prompt_ids, completion_ids = tokens[:prompt], tokens[prompt : prompt + completion]
        if store is None:
            turns.append(
                Turn(
                    prompt_ids,
                    completion_ids,
                    routed_experts=rows,
                    sampling_mask=(counts, ids),
                    sampling_mask_logprobs=logprobs,
                )
            )
        else:
            arrays = RequestArrays(
                prompt_len=prompt,
                completion_len=completion,
                routed_experts=rows,
                sampling_mask=(counts, ids),
                sampling_mask_logprobs=logprobs,
            )
            segments = PayloadWriter(store).write(store.version_prefix(seed), arrays)
            turns.append(Turn(prompt_ids, completion_ids, segments=tuple(segments)))
        previous_end = prompt + completion
    return turns, tokens, routing


@pytest.mark.parametrize("seed", range(6))
def test_multi_turn_trace_inline_and_by_segments_agree(store: Store, seed: int) -> None:
    (inline,) = trace_to_samples(make_turns(seed, None)[0])
    (by_segments,) = trace_to_samples(make_turns(seed, store)[0])
    _, tokens, routing = make_turns(seed, None)
    n = tokens.size
    assert inline.token_ids == by_segments.token_ids == encode_array(tokens)
    expected = routing.copy()
    expected[-1] = expected[-2]  # the final position repeats the previous row
    assert inline.routed_experts == encode_array(expected)
    final = [s for s in by_segments.segments if s.field == "routed_experts"][-1]
    assert (final.pos, final.rows) == (n - 1, 1)
    reader = PayloadReader(store)
    for cp in (1, 2, 4):
        (a,), (b,) = (
            [mbs[0] for mbs in prepare_batch([s], seq_len=64, dp_size=1, pad_to_multiple_of=cp)]
            for s in (inline, by_segments)
        )
        for rank in range(cp):
            want = window_for_rank(micro_batch_tensors(a), rank, cp)
            got = micro_batch_tensors(
                b, cp_rank=rank, cp_size=cp, reader=reader, mask_width="micro_batch"
            )
            for name, tensor in want.as_dict().items():
                other = got.as_dict()[name]
                if name == "routed_expert_weights":
                    assert tensor is None
                    assert other is None
                    continue
                assert tensor is not None, name
                assert other is not None, name
                assert other.dtype == tensor.dtype
                assert other.numpy().tobytes() == tensor.numpy().tobytes(), (cp, rank, name)


def test_turn_that_does_not_extend_the_context_starts_a_new_sample() -> None:
    turns, _, _ = make_turns(0, None)
    rewritten = Turn(turns[1].prompt_ids[::-1].copy(), turns[1].completion_ids, routed_experts=None)
    samples = trace_to_samples([turns[0], rewritten])
    assert [s.num_tokens for s in samples] == [turns[0].length, rewritten.length]
    assert samples[1].routed_experts is None


@pytest.mark.parametrize("by_segments", [False, True])
def test_routing_gap_drops_routing_with_a_warning(
    store: Store, by_segments: bool, caplog: pytest.LogCaptureFixture
) -> None:
    turns, _, _ = make_turns(3, store if by_segments else None, drop_first_row_of_turn=1)
    with caplog.at_level(logging.WARNING):
        (sample,) = trace_to_samples(turns, trace_id="t-3")
    assert sample.routed_experts is None
    assert not [s for s in sample.segments if s.field == "routed_experts"]
    assert sample.sampling_mask is not None or any(
        s.field == "sampling_mask" for s in sample.segments
    )
    assert "t-3" in caplog.text
    assert "routing dropped" in caplog.text


def test_prefill_and_decode_routing_stitch_into_one_covering_list(store: Store) -> None:
    prompt, completion = 7, 5
    routing = np.arange((prompt + completion) * 2, dtype=np.uint8).reshape(-1, 1, 2)
    writer = PayloadWriter(store)
    # prefill forwards the prompt and samples one token: rows [0, prompt)
    prefill = writer.write(
        store.root.url,
        RequestArrays(prompt_len=prompt, completion_len=1, routed_experts=routing[:prompt]),
    )
    # decode emits rows from its first forward (the first sampled token) on
    decode = writer.write(
        store.root.url,
        RequestArrays(
            prompt_len=prompt,
            completion_len=completion,
            routed_experts=routing[prompt : prompt + completion - 1],
        ),
    )
    stitched = stitch_prefill_decode(prefill, decode)
    got = PayloadReader(store).read_field(stitched, "routed_experts", 0, prompt + completion - 1)
    assert got is not None
    np.testing.assert_array_equal(got, routing[: prompt + completion - 1])
    # decode rows win where both cover a position
    overlapping = writer.write(
        store.root.url,
        RequestArrays(
            prompt_len=prompt,
            completion_len=completion,
            routed_experts=routing[prompt - 1 : prompt + completion - 1] + 1,
        ),
    )
    got = PayloadReader(store).read_field(
        stitch_prefill_decode(prefill, overlapping), "routed_experts", 0, prompt + completion - 1
    )
    assert got is not None
    np.testing.assert_array_equal(got[: prompt - 1], routing[: prompt - 1])
    np.testing.assert_array_equal(
        got[prompt - 1 :], routing[prompt - 1 : prompt + completion - 1] + 1
    )
    late = [s.shift(2) for s in decode]
    with pytest.raises(InvalidPayloadError, match="gap"):
        stitch_prefill_decode(prefill, late)


class SampleBeforeSegments(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """`Sample` as it was before segments were added (what an old peer sends)."""

    token_ids: PackedArray
    loss_mask: PackedArray
    multimodal: bool = False
    routed_experts: PackedArray | None = None
    routed_expert_weights: PackedArray | None = None
    sampling_mask: object | None = None
    sampling_mask_logprobs: object | None = None


def test_wire_messages_keep_working_across_versions(store: Store) -> None:
    tokens = np.arange(5, dtype=np.int32)
    old = SampleBeforeSegments(encode_array(tokens), encode_array(np.ones(5, np.uint8)))
    decoded = decode_sample(msgspec.msgpack.encode(old))
    assert decoded.segments == ()
    assert decoded.token_ids == encode_array(tokens)
    segments = PayloadWriter(store).write(
        store.root.url,
        RequestArrays(prompt_len=3, completion_len=2, routed_experts=np.zeros((4, 1, 1), np.uint8)),
    )
    new = make_sample(tokens, np.ones(5, np.uint8), segments=segments)
    data = encode_message(new)
    assert decode_sample(data) == new
    # an old decoder reads a new message and ignores the appended segments
    assert msgspec.msgpack.decode(data, type=SampleBeforeSegments).token_ids == new.token_ids
    (mb,) = pack([new], seq_len=8)
    assert decode_micro_batch(encode_message(mb)) == mb
    with pytest.raises(InvalidPayloadError):
        decode_sample(b"\x93\x01\x02\x03")
    bad = make_sample(tokens, np.ones(5, np.uint8))
    bad_data = encode_message(
        msgspec.structs.replace(
            bad,
            segments=(
                Segment("routed_experts", "memory://traces/x.bin", 0, 3, 4, "uint8", (1, 1)),
            ),
        )
    )
    with pytest.raises(InvalidPayloadError, match="past the 5 tokens"):
        decode_sample(bad_data)
    assert isinstance(mb, MicroBatch)
    assert isinstance(new, Sample)


def big_segment_samples(store: Store, count: int, tokens: int) -> tuple[list[Sample], int]:
    """By-segment samples of ``tokens`` tokens with 48 x 8 routing (written once, reused)."""
    rng = np.random.default_rng(0)
    prompt = tokens - 256
    routing = rng.integers(0, 128, (tokens - 1, 48, 8), dtype=np.uint8)
    counts = rng.integers(1, 4, 256).astype(np.int32)
    segments = PayloadWriter(store).write(
        store.root.url,
        RequestArrays(
            prompt_len=prompt,
            completion_len=256,
            routed_experts=routing,
            sampling_mask=(counts, rng.integers(0, 1000, int(counts.sum()), dtype=np.int32)),
        ),
    )
    loss = np.zeros(tokens, np.uint8)
    loss[prompt:] = 1
    sample = make_sample(rng.integers(0, 1000, tokens, dtype=np.int32), loss, segments=segments)
    return [sample] * count, routing.nbytes * count


def test_packing_never_materializes_segment_payloads(store: Store) -> None:
    samples, payload_bytes = big_segment_samples(store, count=16, tokens=16_384)
    store.stats.reset()
    tracemalloc.start()
    try:
        ranks = prepare_batch(samples, seq_len=16_384, dp_size=2, pad_to_multiple_of=4)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(len(r) for r in ranks) == 16
    assert store.stats.get_requests == 0
    # Token ids, loss masks and position ids (~9 B per token) are copied into the micro
    # batches; the routing (384 B per token, 6 MiB per sample) is never read or copied.
    assert peak < payload_bytes / 20, (peak, payload_bytes)


@pytest.mark.parametrize("mask_width", ["window", "micro_batch"])
def test_a_rank_reads_only_its_window_plus_mask_offsets(store: Store, mask_width: str) -> None:
    samples, _ = big_segment_samples(store, count=2, tokens=4096)
    ((mb,),) = prepare_batch(samples, seq_len=8192, dp_size=1, pad_to_multiple_of=4)
    reader = PayloadReader(store)
    mask_segments = [s for s in mb.segments if s.field == "sampling_mask"]
    routing_segments = [s for s in mb.segments if s.field == "routed_experts"]
    whole = sum(s.nbytes for s in routing_segments)
    for rank in range(4):
        lo, hi = cp_bounds(mb.num_tokens, rank, 4)
        store.stats.reset()
        tensors = micro_batch_tensors(
            mb,
            cp_rank=rank,
            cp_size=4,
            reader=reader,
            mask_width="window" if mask_width == "window" else "micro_batch",
        )
        assert tensors.sampling_mask is not None
        routing_bytes = sum(c.nbytes for s in routing_segments if (c := s.clip(lo, hi)) is not None)
        # The window's width needs the offsets of the mask segments it touches; the micro
        # batch's width needs every mask segment's offsets.
        offset_bytes = sum(
            4 * (s.rows + 1)
            for s in mask_segments
            if mask_width == "micro_batch" or s.clip(lo + 1, hi + 1) is not None
        )
        value_bytes = 4 * int((tensors.sampling_mask >= 0).sum())
        assert store.stats.bytes_requested == routing_bytes + offset_bytes + value_bytes
        assert routing_bytes <= whole // 4 + 384


def test_multimodal_micro_batches_are_read_whole_and_unshifted(store: Store) -> None:
    turns, tokens, _ = make_turns(5, store)
    (sample,) = trace_to_samples(turns)
    (inline,) = trace_to_samples(make_turns(5, None)[0])
    sample = msgspec.structs.replace(sample, multimodal=True)
    inline = msgspec.structs.replace(inline, multimodal=True)
    ((mb,),) = prepare_batch([sample], seq_len=64, dp_size=1, pad_to_multiple_of=4)
    ((inline_mb,),) = prepare_batch([inline], seq_len=64, dp_size=1, pad_to_multiple_of=4)
    assert mb.multimodal
    want = micro_batch_tensors(inline_mb)
    for rank in range(4):
        got = micro_batch_tensors(mb, cp_rank=rank, cp_size=4, reader=PayloadReader(store))
        assert not got.cp_windowed  # the model may defer CP: the caller shifts and shards
        assert got.routed_experts is not None
        assert got.routed_experts.shape[0] == mb.num_tokens
        for name, tensor in want.as_dict().items():
            other = got.as_dict()[name]
            if tensor is None:
                assert other is None
            else:
                assert other is not None
                assert other.numpy().tobytes() == tensor.numpy().tobytes(), name
    assert tokens.size <= mb.num_tokens


def test_turns_mixing_transports_keep_the_segments_and_warn(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    inline_turns, _, _ = make_turns(4, None)
    segment_turns, _, _ = make_turns(4, store)
    mixed = [inline_turns[0], *segment_turns[1:]]
    with caplog.at_level(logging.WARNING):
        (sample,) = trace_to_samples(mixed, trace_id="t-4")
    assert sample.sampling_mask is None
    assert sample.routed_experts is None
    assert sample.segments
    assert "t-4" in caplog.text
