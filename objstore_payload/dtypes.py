"""The allow-list of element types that may appear in a blob or an inline array.

Names are numpy names; bytes on storage and on the wire are always little-endian.
A dtype string from the wire is looked up here and nowhere else, so a hostile
``"object"`` or ``">f8"`` can never reach ``np.dtype``.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from objstore_payload.errors import InvalidSegmentError

__all__ = ["DTYPE_NAMES", "dtype_from_name", "name_of_dtype"]

_DTYPES: Final[dict[str, np.dtype[np.generic]]] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "uint8",
        "int8",
        "uint16",
        "int16",
        "uint32",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
    )
}

DTYPE_NAMES: Final[frozenset[str]] = frozenset(_DTYPES)
"""Every dtype name a segment or an inline array may carry."""


def dtype_from_name(
    name: str, *, error: type[ValueError] = InvalidSegmentError
) -> np.dtype[np.generic]:
    """The little-endian numpy dtype for an allow-listed name; ``error`` otherwise."""
    try:
        return _DTYPES[name]
    except (KeyError, TypeError):
        raise error(
            f"dtype {name!r} is not allowed; expected one of {sorted(DTYPE_NAMES)}"
        ) from None


def name_of_dtype(dtype: np.dtype[np.generic], *, error: type[ValueError] = ValueError) -> str:
    """The allow-list name of a numpy dtype of any byte order, or ``error``."""
    name = dtype.newbyteorder("=").name
    if name not in _DTYPES:
        raise error(f"dtype {dtype} is not allowed; expected one of {sorted(DTYPE_NAMES)}")
    return name
