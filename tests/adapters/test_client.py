"""Decoding /inference/v1/generate choices: segments, inline packed, and vLLM's native forms."""

from __future__ import annotations

import base64
import io

import msgspec
import numpy as np
import pytest

from objstore_payload import (
    InlineDecodeError,
    InvalidSegmentError,
    PayloadWriter,
    RequestArrays,
    Store,
    StoreConfig,
    UriNotAllowedError,
    codec,
)
from objstore_payload.adapters.client import decode_choice, decode_generate_response
from objstore_payload.segment import segments_to_builtins

PROMPT = np.arange(4, dtype=np.int32)
ROUTING = np.arange(24, dtype=np.uint8).reshape(4, 2, 3)
COUNTS, IDS = np.array([1, 3, 0], np.int32), np.array([7, 8, 9, 10], np.int32)


def npy_b64(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode()


def through_json(obj: object) -> object:
    return msgspec.json.decode(msgspec.json.encode(obj))


def test_inline_packed_choice() -> None:
    choice = through_json(
        {
            "index": 0,
            "token_ids": [11, 12, 13],
            "routed_experts": codec.to_builtins(codec.encode_routing(ROUTING, start=2)),
            "sampling_mask": codec.to_builtins(codec.encode_mask(COUNTS, IDS)),
            "completion_logprobs": codec.to_builtins(
                codec.encode_logprobs(np.array([-0.5, -1, -2]))
            ),
        }
    )
    turn = decode_choice(choice, PROMPT)  # type: ignore[arg-type]
    np.testing.assert_array_equal(turn.routed_experts, ROUTING)  # type: ignore[arg-type]
    assert turn.sampling_mask is not None
    assert turn.sampling_mask[0].tolist() == [1, 3, 0]
    assert turn.sampling_mask[1].tolist() == [7, 8, 9, 10]
    assert turn.completion_logprobs is not None
    assert turn.completion_logprobs.tolist() == [-0.5, -1.0, -2.0]
    assert turn.segments == ()


@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.uint8, np.uint16])
def test_native_vllm_choice(dtype: type) -> None:
    choice = through_json(
        {
            "token_ids": [11, 12, 13],
            "routed_experts": npy_b64(ROUTING.astype(dtype)),
            "sampling_mask": [[7], [8, 9, 10], []],
            "logprobs": {
                "content": [
                    {"token_id": 11, "logprob": -0.5},
                    {"token_id": 12, "logprob": -1.0},
                    {"token_id": 13, "logprob": -2.0},
                ]
            },
        }
    )
    turn = decode_choice(choice, PROMPT)  # type: ignore[arg-type]
    assert turn.routed_experts is not None
    assert turn.routed_experts.dtype == dtype
    np.testing.assert_array_equal(turn.routed_experts, ROUTING)
    assert turn.sampling_mask is not None
    assert turn.sampling_mask[0].tolist() == [1, 3, 0]
    assert turn.completion_logprobs is not None


def test_segments_are_passed_through_after_the_root_check() -> None:
    store = Store(StoreConfig(root="memory://client/run"))
    segments = PayloadWriter(store).write(
        store.version_prefix(1),
        RequestArrays(
            prompt_len=4, completion_len=3, routed_experts=ROUTING, sampling_mask=(COUNTS, IDS)
        ),
    )
    body = msgspec.json.encode(
        {"choices": [{"token_ids": [11, 12, 13], "segments": segments_to_builtins(segments)}]}
    )
    (turn,) = decode_generate_response(body, PROMPT, allowed_roots=["memory://client/run"])
    assert turn.segments == tuple(segments)
    with pytest.raises(UriNotAllowedError, match="not under any allowed root"):
        decode_generate_response(body, PROMPT, allowed_roots=["memory://client/other"])
    with pytest.raises(UriNotAllowedError):
        decode_generate_response(body, PROMPT)


@pytest.mark.parametrize(
    ("choice", "error", "message"),
    [
        ({"token_ids": "abc"}, InlineDecodeError, "token_ids"),
        ({"token_ids": [1], "routed_experts": "not base64!"}, InlineDecodeError, "base64 .npy"),
        (
            {"token_ids": [1], "routed_experts": npy_b64(np.zeros((2, 2), np.int32))},
            InlineDecodeError,
            "layers, top_k",
        ),
        (
            {"token_ids": [1], "routed_experts": npy_b64(np.zeros((1, 1, 1), np.float32))},
            InlineDecodeError,
            "routing dtype",
        ),
        (
            {"token_ids": [1], "routed_experts": npy_b64(np.full((1, 1, 1), -3, np.int32))},
            InlineDecodeError,
            "non-negative",
        ),
        (
            {"token_ids": [1], "routed_experts": npy_b64(np.zeros((9, 1, 1), np.uint8))},
            InlineDecodeError,
            "do not fit",
        ),
        ({"token_ids": [1, 2], "sampling_mask": [[1]]}, InlineDecodeError, "1 rows for 2"),
        ({"token_ids": [1], "sampling_mask": [["x"]]}, InlineDecodeError, "integers"),
        ({"token_ids": [1], "sampling_mask": [[7.9]]}, InlineDecodeError, "integers"),
        ({"token_ids": [1], "sampling_mask": [[True]]}, InlineDecodeError, "integers"),
        ({"token_ids": [1], "sampling_mask": [[-3]]}, InlineDecodeError, "non-negative"),
        ({"token_ids": [1], "sampling_mask": [[2**40]]}, InlineDecodeError, "int32"),
        ({"token_ids": [11.9, 12.2]}, InlineDecodeError, "integers"),
        ({"token_ids": ["11"]}, InlineDecodeError, "integers"),
        ({"token_ids": [-1]}, InlineDecodeError, "non-negative"),
        (
            {
                "token_ids": [1, 2, 3],
                "routed_experts": codec.to_builtins(codec.encode_routing(ROUTING, start=0)),
            },
            InlineDecodeError,
            "end-anchored",
        ),
        ({"token_ids": [1], "sampling_mask": "nope"}, InlineDecodeError, "not a packed array"),
        (
            {"token_ids": [1], "logprobs": {"content": [{"token_id": 1}]}},
            InlineDecodeError,
            "numeric logprob",
        ),
        (
            {"token_ids": [1], "segments": [{"field": "routed_experts"}]},
            InvalidSegmentError,
            "invalid segments",
        ),
        (
            {
                "token_ids": [1],
                "sampling_mask_logprobs": codec.to_builtins(codec.encode_logprobs(np.zeros(1))),
            },
            InlineDecodeError,
            "needs the sampling_mask",
        ),
    ],
)
def test_malformed_choices_are_typed_errors(
    choice: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        decode_choice(through_json(choice), PROMPT)  # type: ignore[arg-type]


@pytest.mark.parametrize("body", [b"not json", b'{"choices": 3}', b"[]", b'{"choices": [1]}'])
def test_malformed_responses_are_typed_errors(body: bytes) -> None:
    with pytest.raises(InlineDecodeError):
        decode_generate_response(body, PROMPT)


def test_worked_example_survives_the_client_and_the_trace() -> None:
    from objstore_payload.adapters.traces import trace_to_samples

    choice = through_json(
        {
            "token_ids": [11, 12, 13],
            "routed_experts": codec.to_builtins(codec.encode_routing(ROUTING, start=2)),
            "sampling_mask": codec.to_builtins(codec.encode_mask(COUNTS, IDS)),
        }
    )
    turn = decode_choice(choice, PROMPT)  # type: ignore[arg-type]
    (sample,) = trace_to_samples([turn])
    assert sample.num_tokens == 7
    # routing of the worked example starts at position 2: positions 0-1 are a gap
    assert sample.routed_experts is None
