"""Raw byte views of numpy arrays, without copies."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["byte_view"]


def byte_view(array: np.ndarray) -> memoryview:
    """A flat, writable-if-the-array-is byte view of a C-contiguous ``array`` (no copy)."""
    if not array.flags.c_contiguous:
        raise ValueError("byte_view needs a C-contiguous array")
    flat: Any = array.reshape(-1).view(np.uint8)  # numpy's stubs do not declare Buffer
    return memoryview(flat)
