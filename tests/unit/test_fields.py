"""The field table."""

from __future__ import annotations

import math

import pytest

from objstore_payload import FIELDS, UnknownFieldError, get_field


def test_field_table_matches_the_data_model() -> None:
    table = {
        name: (s.ragged, sorted(s.stored_dtypes), s.fill, s.window) for name, s in FIELDS.items()
    }
    assert table == {
        "routed_experts": (False, ["uint16", "uint8"], 0, "inputs"),
        "routed_expert_weights": (False, ["float32"], 0.0, "inputs"),
        "sampling_mask": (True, ["int32"], -1, "labels"),
        "sampling_mask_logprobs": (True, ["float32"], -math.inf, "sequence"),
    }
    assert get_field("sampling_mask").value_dtype == "int32"


def test_unknown_field_is_a_typed_error() -> None:
    with pytest.raises(UnknownFieldError, match="known fields"):
        get_field("routed_expertz")
    with pytest.raises(TypeError):
        _ = get_field("routed_experts").value_dtype
