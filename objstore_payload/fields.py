"""The field table: every per-token array the data plane knows, as data.

A new field is one new entry in `FIELDS`. Everything else (writer, reader, fills,
widths, trainer windows) looks its behaviour up here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from objstore_payload.errors import UnknownFieldError

__all__ = ["FIELDS", "FieldSpec", "Window", "get_field"]

Window = Literal["inputs", "labels", "sequence"]
"""Which positions a trainer's context-parallel rank reads for a field.

- ``inputs``: the rank's own input positions ``[lo, hi)`` (the forward pass consumes them).
- ``labels``: one ahead, ``[lo + 1, hi + 1)``: the logit at t predicts token t + 1.
- ``sequence``: the whole sequence (consumed after the CP gather, e.g. by the loss).
"""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """How one per-token field is stored and read."""

    name: str
    """Field name as it appears in segments and responses."""
    ragged: bool
    """True for rows of varying width, stored as CSR (uint32 offsets, then values)."""
    stored_dtypes: frozenset[str]
    """Fixed-width fields: allowed row dtypes. Ragged fields: the one value dtype."""
    fill: int | float
    """Value of uncovered positions and of the padding of narrow rows."""
    window: Window
    """Which positions a CP rank reads (see `Window`)."""
    row_ndim: int
    """Dimensions of one row: 2 for ``[layers, top_k]``, 1 for a ragged row."""
    max_width: int = 1 << 18
    """Ragged fields: the widest row a reader accepts (a guard against corrupt offsets)."""

    @property
    def value_dtype(self) -> str:
        """Ragged fields: the dtype of the values region."""
        if not self.ragged:
            raise TypeError(f"{self.name} is not ragged")
        (name,) = self.stored_dtypes
        return name


FIELDS: Final[Mapping[str, FieldSpec]] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            FieldSpec(
                name="routed_experts",
                ragged=False,
                stored_dtypes=frozenset({"uint8", "uint16"}),
                fill=0,
                window="inputs",
                row_ndim=2,
            ),
            FieldSpec(
                name="routed_expert_weights",
                ragged=False,
                stored_dtypes=frozenset({"float32"}),
                fill=0.0,
                window="inputs",
                row_ndim=2,
            ),
            FieldSpec(
                name="sampling_mask",
                ragged=True,
                stored_dtypes=frozenset({"int32"}),
                fill=-1,
                window="labels",
                row_ndim=1,
            ),
            FieldSpec(
                name="sampling_mask_logprobs",
                ragged=True,
                stored_dtypes=frozenset({"float32"}),
                fill=-math.inf,
                window="sequence",
                row_ndim=1,
            ),
        )
    }
)
"""Every known field, by name."""


def get_field(name: str) -> FieldSpec:
    """The spec of a known field, or `UnknownFieldError`."""
    try:
        return FIELDS[name]
    except KeyError:
        raise UnknownFieldError(
            f"unknown payload field {name!r}; known fields: {sorted(FIELDS)}"
        ) from None
