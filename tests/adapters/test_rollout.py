"""Packing rules: what shares a micro batch, padding, dummies, truncation placeholders."""

from __future__ import annotations

import numpy as np
import pytest

from objstore_payload import InvalidPayloadError, Segment
from objstore_payload.adapters.rollout import (
    make_dummy,
    make_sample,
    pack,
    pad,
    prepare_batch,
    truncate,
)
from objstore_payload.codec import decode_array

URI = "memory://rollout/v0/a.bin"


def routing_segment(n: int) -> Segment:
    return Segment("routed_experts", URI, 0, 0, n, "uint8", (2, 2))


def mask_segment(pos: int, rows: int) -> Segment:
    return Segment("sampling_mask", URI, 4096, pos, rows, "uint32", ())


def tokens(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(n, dtype=np.int32), np.ones(n, np.uint8)


def test_samples_with_and_without_routing_or_transport_never_share_a_micro_batch() -> None:
    with_routing = make_sample(*tokens(4), segments=[routing_segment(4)])
    without = make_sample(*tokens(4), segments=[mask_segment(2, 2)])
    inline = make_sample(*tokens(4), routed_experts=np.zeros((4, 2, 2), np.uint8))
    plain = make_sample(*tokens(4))
    batches = pack([with_routing, without, inline, plain, with_routing, without], seq_len=64)
    kinds = [
        (
            mb.transport,
            any(s.field == "routed_experts" for s in mb.segments) or mb.routed_experts is not None,
            len(mb.sample_lengths),
        )
        for mb in batches
    ]
    assert kinds == [
        ("segments", True, 2),
        ("segments", False, 2),
        ("inline", True, 1),
        ("none", False, 1),
    ]


def test_packing_shifts_segments_and_restarts_positions() -> None:
    a = make_sample(*tokens(5), segments=[routing_segment(5)])
    b = make_sample(*tokens(3), segments=[routing_segment(3)])
    (mb,) = pack([a, b], seq_len=8)
    assert [s.pos for s in mb.segments] == [0, 5]
    assert decode_array(mb.position_ids).tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert mb.sample_lengths == (5, 3)


def test_first_fit_opens_a_new_micro_batch_when_full() -> None:
    samples = [make_sample(*tokens(n)) for n in (6, 5, 2, 4)]
    assert [mb.sample_lengths for mb in pack(samples, seq_len=8)] == [(6, 2), (5,), (4,)]


def test_padding_is_loss_masked_and_leaves_segments_alone() -> None:
    mb = pad(pack([make_sample(*tokens(5), segments=[routing_segment(5)])], seq_len=8)[0], 4)
    assert mb.num_tokens == 8
    assert decode_array(mb.loss_mask).tolist() == [1] * 5 + [0] * 3
    assert mb.segments == (routing_segment(5),)
    inline = pad(
        pack([make_sample(*tokens(5), routed_experts=np.ones((5, 2, 2), np.uint8))], seq_len=8)[0],
        4,
    )
    assert inline.routed_experts is not None
    assert decode_array(inline.routed_experts)[5:].tolist() == np.zeros((3, 2, 2)).tolist()


def test_dummies_keep_routing_and_drop_masks() -> None:
    sample = make_sample(*tokens(4), segments=[routing_segment(4), mask_segment(2, 2)])
    ranks = prepare_batch([sample], seq_len=8, dp_size=3, pad_to_multiple_of=2)
    assert [len(r) for r in ranks] == [1, 1, 1]
    dummy = ranks[1][0]
    assert dummy.dummy
    assert not decode_array(dummy.loss_mask).any()
    assert [s.field for s in dummy.segments] == ["routed_experts"]
    assert make_dummy(ranks[0][0]).segments == dummy.segments


def test_truncation_keeps_a_zero_row_placeholder_for_a_cut_out_mask() -> None:
    sample = make_sample(*tokens(10), segments=[routing_segment(9), mask_segment(7, 3)])
    cut = truncate(sample, 6)
    assert cut.num_tokens == 6
    assert [(s.field, s.pos, s.rows) for s in cut.segments] == [
        ("routed_experts", 0, 6),
        ("sampling_mask", 0, 0),
    ]


def test_segments_past_the_sample_are_refused() -> None:
    with pytest.raises(InvalidPayloadError, match="past the 4 tokens"):
        make_sample(*tokens(4), segments=[routing_segment(5)])
    with pytest.raises(InvalidPayloadError, match="one row per token"):
        make_sample(*tokens(4), routed_experts=np.zeros((3, 2, 2), np.uint8))


def test_a_sample_mixing_inline_and_segment_payload_is_refused() -> None:
    with pytest.raises(InvalidPayloadError, match="inline or by segments, not both"):
        make_sample(
            *tokens(4), routed_experts=np.zeros((4, 2, 2), np.uint8), segments=[mask_segment(2, 2)]
        )
