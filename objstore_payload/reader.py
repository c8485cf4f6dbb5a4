"""The reader: token windows of fields, from segments, in at most two read passes.

For a window ``[lo, hi)`` of a field, the result has one row per position. Positions no
segment covers read as the field's fill; where segments overlap, the later one wins;
rows narrower than the result are padded with the fill. A ragged field's width is, by
default, the widest row among **all** the given segments of that field (min 1), not only
those in the window, so every context-parallel rank of a micro batch gets the same width,
as the inline path pads; that costs reading every segment's offset words on every rank.
``FieldWindow(width_of="window")`` trims the width to the widest row inside the window
instead (min 1) and reads only the offsets of the segments the window touches.

One `read_window` call reads several fields for one window: pass 1 fetches the offset
words of the ragged segments (4 bytes per row, to know widths and value spans); pass 2
fetches every value span and every fixed-width row range together. Each pass is one
concurrent, coalesced `Store.read_ranges` call. Every URI is checked against the store's
root before the first byte is requested. Assembly is vectorized per segment: no Python
object per token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from objstore_payload.buffers import byte_view
from objstore_payload.dtypes import dtype_from_name
from objstore_payload.errors import BlobFormatError, ChecksumMismatchError, InvalidSegmentError
from objstore_payload.fields import FieldSpec, get_field
from objstore_payload.segment import MAX_POSITION, Segment
from objstore_payload.store.store import Store

__all__ = ["FieldWindow", "PayloadReader", "WindowPlan"]

_OFFSET = np.dtype("<u4")

Range = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class FieldWindow:
    """Read ``field`` over token positions ``[lo, hi)``."""

    field: str
    lo: int
    hi: int
    width: int | None = None
    """Ragged fields: force this width instead of the widest row of the segments."""
    width_of: Literal["segments", "window"] = "segments"
    """Ragged fields without a forced width: ``segments``, the widest row of all the given
    segments (the same on every window of a sequence); ``window``, the widest row inside
    this window (cheaper: only the window's segments' offsets are read)."""

    def __post_init__(self) -> None:
        if type(self.lo) is not int or type(self.hi) is not int or not 0 <= self.lo <= self.hi:
            raise InvalidSegmentError(
                f"window [{self.lo!r}, {self.hi!r}) of {self.field} is invalid"
            )
        if self.hi > MAX_POSITION + 1:
            raise InvalidSegmentError(f"window end {self.hi} exceeds the largest token position")
        if self.width is not None and (type(self.width) is not int or self.width < 1):
            raise InvalidSegmentError(f"window width must be a positive int, got {self.width!r}")
        if self.width_of not in ("segments", "window"):
            raise InvalidSegmentError(
                f"width_of must be 'segments' or 'window', got {self.width_of!r}"
            )


@dataclass(slots=True)
class _RaggedField:
    spec: FieldSpec
    segments: list[Segment]
    value_dtype: np.dtype[np.generic]
    offsets: list[np.ndarray | None]
    width: int = 1
    counts: list[np.ndarray | None] | None = None
    """Per segment: values per row (from its offsets), once pass 1 is in."""


class WindowPlan:
    """The two read passes of one window read, without I/O (shared by the sync and async
    readers, and usable to count requests without reading)."""

    def __init__(self, segments: Iterable[Segment], windows: Sequence[FieldWindow]) -> None:
        self.windows = list(windows)
        wanted = {w.field for w in self.windows}
        self.specs = {name: get_field(name) for name in wanted}
        self.by_field: dict[str, list[Segment]] = {name: [] for name in wanted}
        for seg in segments:
            # A zero-row segment reads nothing but still says the field is present: a
            # sample truncated before its first completion token keeps such a mask
            # placeholder and gets an all-fill, width-1 tensor, as the inline path does.
            if seg.field in self.by_field:
                self.by_field[seg.field].append(seg)
        for name, segs in self.by_field.items():
            _check_segments(self.specs[name], segs)
        # Each window's segments clipped to it, once: (index in by_field, segment, clipped).
        self._clipped = [
            [
                (index, seg, clipped)
                for index, seg in enumerate(self.by_field[w.field])
                if (clipped := seg.clip(w.lo, w.hi)) is not None
            ]
            for w in self.windows
        ]
        self._ragged: dict[str, _RaggedField] = {}
        self._offset_owners: list[tuple[str, int]] = []
        self._value_owners: list[tuple[int, int, Segment, Segment]] = []

    def uris(self) -> set[str]:
        """Every URI this plan may read."""
        return {seg.uri for segs in self.by_field.values() for seg in segs if seg.rows}

    # -- pass 1 ---------------------------------------------------------------------
    def offset_ranges(self) -> list[Range]:
        """Pass 1: the offset words of the ragged segments (all of them, for the width;
        only those in the window when no window of the field takes its width from all
        the segments)."""
        ranges: list[Range] = []
        self._offset_owners = []
        for name, segs in self.by_field.items():
            spec = self.specs[name]
            if not spec.ragged or not segs:
                continue
            need_all = any(
                w.field == name and w.width is None and w.width_of == "segments"
                for w in self.windows
            )
            touched = {
                index
                for w, clipped in zip(self.windows, self._clipped, strict=True)
                if w.field == name
                for index, _, _ in clipped
            }
            state = _RaggedField(spec, segs, dtype_from_name(spec.value_dtype), [None] * len(segs))
            self._ragged[name] = state
            for index, seg in enumerate(segs):
                if not seg.rows:
                    continue
                if need_all or index in touched:
                    ranges.append(
                        (seg.uri, seg.offset, seg.offset + _OFFSET.itemsize * (seg.rows + 1))
                    )
                    self._offset_owners.append((name, index))
        return ranges

    def take_offsets(self, buffers: Sequence[memoryview]) -> None:
        """Pass 1 results: check the offsets and compute each ragged field's width.

        Vectorized per field over all its segments (one concatenation, one diff), so the
        cost does not grow with a Python loop of numpy calls per segment; a failed check
        is re-run per segment to name the culprit."""
        owners_of: dict[str, list[tuple[int, memoryview]]] = {}
        for (name, index), buf in zip(self._offset_owners, buffers, strict=True):
            owners_of.setdefault(name, []).append((index, buf))
        for name, state in self._ragged.items():
            state.counts = [None] * len(state.segments)
            owners = owners_of.get(name)
            state.width = _take_field_offsets(state, owners) if owners else 1

    # -- pass 2 ---------------------------------------------------------------------
    def _widest_in(self, w_index: int) -> int:
        """The widest row (min 1) of a ragged window's segments inside the window."""
        state = self._ragged[self.windows[w_index].field]
        widest = 1
        if state.counts is None:  # no offsets read: no segment with rows in the window
            return widest
        for index, seg, clipped in self._clipped[w_index]:
            counts = state.counts[index]
            if counts is not None:
                a = clipped.pos - seg.pos
                widest = max(widest, int(counts[a : a + clipped.rows].max()))
        return widest

    def _allocate(self) -> None:
        # Fixed-width outputs start uninitialized and only uncovered rows get the fill
        # (routing is hundreds of bytes per row: writing it twice would double the cost).
        self._outputs: list[np.ndarray | None] = []
        self._covered: list[np.ndarray | None] = []
        for w_index, window in enumerate(self.windows):
            spec = self.specs[window.field]
            segs = self.by_field[window.field]
            length = window.hi - window.lo
            if not segs:
                self._outputs.append(None)
                self._covered.append(None)
            elif spec.ragged:
                state = self._ragged[window.field]
                width = window.width
                if width is None:
                    width = self._widest_in(w_index) if window.width_of == "window" else state.width
                self._outputs.append(np.full((length, width), spec.fill, dtype=state.value_dtype))
                self._covered.append(None)
            else:
                self._outputs.append(_fixed_output(spec, segs, length))
                self._covered.append(np.zeros(length, dtype=bool))

    def value_ranges(self) -> list[Range]:
        """Pass 2: every fixed-width row range and ragged value span inside the windows."""
        self._allocate()
        self._packed_values: dict[int, np.ndarray] = {}
        ranges: list[Range] = []
        self._value_owners = []
        self._destinations: list[memoryview | None] = []
        for w_index, window in enumerate(self.windows):
            spec = self.specs[window.field]
            out = self._outputs[w_index]
            clipped_all = self._clipped[w_index]
            alone = _rows_alone([c for _, _, c in clipped_all])
            packed = spec.ragged and bool(clipped_all) and all(alone)
            if packed:
                # No overlaps: the values of every segment land in one array, in row
                # order, and `assemble` scatters them with one boolean assignment.
                clipped_all = sorted(clipped_all, key=lambda item: item[2].pos)
                spans = []
                for index, seg, clipped in clipped_all:
                    offsets = self._ragged[window.field].offsets[index]
                    assert offsets is not None
                    a = clipped.pos - seg.pos
                    spans.append((int(offsets[a]), int(offsets[a + clipped.rows])))
                values = np.empty(
                    sum(end - start for start, end in spans) // spec_itemsize(spec),
                    dtype=dtype_from_name(spec.value_dtype),
                )
                self._packed_values[w_index] = values
                cursor = 0
            for (index, seg, clipped), is_alone in zip(clipped_all, alone, strict=True):
                dest = None
                if packed:
                    start, end = spans.pop(0)
                    ranges.append((seg.uri, start, end))
                    size = (end - start) // values.itemsize
                    dest = byte_view(values[cursor : cursor + size])
                    cursor += size
                elif spec.ragged:
                    offsets = self._ragged[window.field].offsets[index]
                    assert offsets is not None
                    a = clipped.pos - seg.pos
                    start, end = int(offsets[a]), int(offsets[a + clipped.rows])
                    ranges.append((seg.uri, start, end))
                else:
                    ranges.append((seg.uri, *clipped.byte_range))
                    assert out is not None
                    row = clipped.pos - window.lo
                    # Rows that no other segment touches, in the output's own dtype and
                    # shape, are read straight into the output (no buffer, no copy).
                    if (
                        is_alone
                        and dtype_from_name(clipped.dtype) == out.dtype
                        and clipped.shape == out.shape[1:]
                    ):
                        dest = byte_view(out[row : row + clipped.rows])
                self._destinations.append(dest)
                self._value_owners.append((w_index, index, seg, clipped))
        return ranges

    def value_destinations(self) -> list[memoryview | None]:
        """Pass 2: where each value range may be read straight into (or None)."""
        return self._destinations

    def _scatter_packed(self, w_index: int, values: np.ndarray) -> None:
        """A ragged window without overlapping segments: its values, read in row order
        into one array, land with one boolean assignment."""
        out = self._outputs[w_index]
        assert out is not None
        window = self.windows[w_index]
        state = self._ragged[window.field]
        assert state.counts is not None
        counts = np.zeros(out.shape[0], np.int64)
        for index, seg, clipped in self._clipped[w_index]:
            seg_counts = state.counts[index]
            assert seg_counts is not None
            a = clipped.pos - seg.pos
            row = clipped.pos - window.lo
            counts[row : row + clipped.rows] = seg_counts[a : a + clipped.rows]
        width = out.shape[1]
        rows = np.flatnonzero(counts)
        counts = counts[rows]
        if counts.size and int(counts.max()) > width:
            raise InvalidSegmentError(
                f"a {window.field} row holds {int(counts.max())} values, wider than width {width}"
            )
        # Flat index of value j: (start of its row) + (j - values before its row); the
        # work is per value, not per (row x width) cell as a boolean mask would be.
        before = np.cumsum(counts) - counts
        flat = np.repeat(rows * width - before, counts) + np.arange(values.size)
        out.reshape(-1)[flat] = values

    def assemble(self, buffers: Sequence[memoryview]) -> list[np.ndarray | None]:
        """Pass 2 results: one array per window (None for a field with no segments)."""
        if not hasattr(self, "_outputs"):
            self._allocate()
            self._destinations = []
            self._packed_values = {}
        for w_index, values in self._packed_values.items():
            self._scatter_packed(w_index, values)
        for position, ((w_index, index, seg, clipped), buf) in enumerate(
            zip(self._value_owners, buffers, strict=True)
        ):
            if w_index in self._packed_values:
                continue
            out = self._outputs[w_index]
            assert out is not None
            window = self.windows[w_index]
            row = clipped.pos - window.lo
            spec = self.specs[window.field]
            if spec.ragged:
                state = self._ragged[window.field]
                assert state.counts is not None
                counts = state.counts[index]
                assert counts is not None
                a = clipped.pos - seg.pos
                counts = counts[a : a + clipped.rows]
                _scatter_ragged(out, row, counts, buf, state.value_dtype, spec, seg)
            else:
                if self._destinations[position] is None:
                    _scatter_fixed(out, row, clipped, buf, spec)
                mask = self._covered[w_index]
                assert mask is not None
                mask[row : row + clipped.rows] = True
        for window, out, mask in zip(self.windows, self._outputs, self._covered, strict=True):
            if out is not None and mask is not None and not mask.all():
                out[~mask] = self.specs[window.field].fill
        return self._outputs


def spec_itemsize(spec: FieldSpec) -> int:
    """Bytes of one value of a ragged field."""
    return dtype_from_name(spec.value_dtype).itemsize


def _take_field_offsets(state: _RaggedField, owners: Sequence[tuple[int, memoryview]]) -> int:
    """Check and keep the offsets of one ragged field's segments; its widest row (min 1)."""
    assert state.counts is not None
    itemsize = state.value_dtype.itemsize
    arrays = [np.frombuffer(buf, dtype=_OFFSET) for _, buf in owners]
    flat = np.concatenate(arrays).astype(np.int64)
    sizes = np.fromiter((a.size for a in arrays), np.int64, len(arrays))
    starts = np.zeros(len(arrays), np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    steps = np.empty(flat.size, np.int64)
    steps[:-1] = flat[1:] - flat[:-1]
    steps[starts + sizes - 1] = 0  # no step across two segments (or past the end)
    segs = [state.segments[index] for index, _ in owners]
    firsts = np.fromiter(
        (seg.offset + _OFFSET.itemsize * (seg.rows + 1) for seg in segs), np.int64, len(segs)
    )
    if (
        np.any(flat[starts] < firsts)
        or int(steps.min()) < 0
        or np.any(steps % itemsize)
        or int(steps.max()) // itemsize > state.spec.max_width
    ):
        for seg, offsets in zip(segs, arrays, strict=True):  # raises for the culprit
            _check_offsets(seg, offsets.astype(np.int64), itemsize, state.spec)
        raise AssertionError("offset checks disagree")  # pragma: no cover
    counts = steps // itemsize
    for (index, _), start, size in zip(owners, starts.tolist(), sizes.tolist(), strict=True):
        state.offsets[index] = flat[start : start + size]
        state.counts[index] = counts[start : start + size - 1]
    return max(int(counts.max()), 1)


def _rows_alone(clipped: Sequence[Segment]) -> list[bool]:
    """For each segment, whether no other segment of the list covers any of its rows
    (then the order in which they land does not matter)."""
    order = sorted(range(len(clipped)), key=lambda i: clipped[i].pos)
    alone = [True] * len(clipped)
    reach, reach_index = -1, -1
    for i in order:
        if clipped[i].pos < reach:
            alone[i] = False
            alone[reach_index] = False
        if clipped[i].end > reach:
            reach, reach_index = clipped[i].end, i
    return alone


def _check_segments(spec: FieldSpec, segs: Sequence[Segment]) -> None:
    for seg in segs:
        if spec.ragged:
            if seg.dtype != "uint32" or seg.shape != ():
                raise InvalidSegmentError(
                    f"{spec.name} is ragged: its segments address uint32 offset words with "
                    f"shape [], got {seg.dtype} {list(seg.shape)}"
                )
        elif seg.dtype not in spec.stored_dtypes or len(seg.shape) != spec.row_ndim:
            raise InvalidSegmentError(
                f"{spec.name} segments must be {sorted(spec.stored_dtypes)} rows of "
                f"{spec.row_ndim} dimensions, got {seg.dtype} {list(seg.shape)}"
            )


def _check_offsets(seg: Segment, offsets: np.ndarray, itemsize: int, spec: FieldSpec) -> int:
    """Check a segment's offset words; return its widest row (in values)."""
    # The values of a CSR region follow all of its offset words, so even a clipped
    # segment's first offset lies past its own last word.
    steps = np.diff(offsets)
    if offsets[0] < seg.offset + _OFFSET.itemsize * (seg.rows + 1) or (
        steps.size and steps.min() < 0
    ):
        raise BlobFormatError(f"{seg.uri}: corrupt {spec.name} offsets at byte {seg.offset}")
    if steps.size and (np.any(steps % itemsize) or int(steps.max()) // itemsize > spec.max_width):
        raise BlobFormatError(
            f"{seg.uri}: {spec.name} offsets at byte {seg.offset} give rows that are misaligned "
            f"or wider than {spec.max_width}"
        )
    return int(steps.max()) // itemsize if steps.size else 0


def _fixed_output(spec: FieldSpec, segs: Sequence[Segment], length: int) -> np.ndarray:
    ndim = {len(s.shape) for s in segs}
    if len(ndim) != 1:
        raise InvalidSegmentError(
            f"{spec.name} segments mix row shapes {sorted({s.shape for s in segs})}"
        )
    shape = tuple(int(d) for d in np.max([s.shape for s in segs], axis=0)) if segs[0].shape else ()
    dtype = np.result_type(*(dtype_from_name(s.dtype) for s in segs))
    return np.empty((length, *shape), dtype=dtype)


def _scatter_fixed(
    out: np.ndarray, row: int, clipped: Segment, buf: memoryview, spec: FieldSpec
) -> None:
    rows = np.frombuffer(buf, dtype=dtype_from_name(clipped.dtype)).reshape(
        (clipped.rows, *clipped.shape)
    )
    target = out[row : row + clipped.rows]
    if clipped.shape == target.shape[1:]:
        target[...] = rows
    else:
        # A narrower row fills the leading entries; reset first so that a later,
        # narrower segment does not leave an earlier one's values behind.
        target[...] = spec.fill
        target[(slice(None), *(slice(0, d) for d in clipped.shape))] = rows


def _scatter_ragged(
    out: np.ndarray,
    row: int,
    counts: np.ndarray,
    buf: memoryview,
    value_dtype: np.dtype[np.generic],
    spec: FieldSpec,
    seg: Segment,
) -> None:
    width = out.shape[1]
    if counts.size and int(counts.max()) > width:
        raise InvalidSegmentError(
            f"{seg.uri}: a {spec.name} row holds {int(counts.max())} values, "
            f"wider than width {width}"
        )
    values = np.frombuffer(buf, dtype=value_dtype)
    target = out[row : row + counts.size]
    target[...] = spec.fill
    # Row-major order of the mask is CSR order, so one boolean assignment scatters it.
    target[np.arange(width) < counts[:, None]] = values


class PayloadReader:
    """Reads token windows of payload fields from segments through one `Store`.

    ``verify=True`` first checks every region of every blob a read touches against the
    CRC32C in its trailer (`ChecksumMismatchError` on a mismatch), then reads the window
    as usual. It costs a HEAD and two small GETs per blob plus reading whole blobs
    instead of windows (see docs/reliability.md for when to turn it on).
    """

    def __init__(self, store: Store, *, verify: bool = False) -> None:
        self.store = store
        self.verify = verify

    def _plan(self, segments: Iterable[Segment], windows: Sequence[FieldWindow]) -> WindowPlan:
        plan = WindowPlan(segments, windows)
        for uri in plan.uris():  # every URI is checked before the first request
            self.store.check_uri(uri)
        if self.verify:
            self._verify(plan.uris())
        return plan

    def _verify(self, uris: Iterable[str]) -> None:
        from objstore_payload.verify import verify_blob

        for uri in sorted(uris):
            _, checks = verify_blob(self.store, uri)
            for check in checks:
                if not check.ok:
                    region = check.region
                    raise ChecksumMismatchError(
                        f"{uri}: the {region.field} region at byte {region.offset} "
                        f"({region.nbytes} bytes) fails its CRC32C: trailer "
                        f"{region.crc32c:#010x}, read {check.actual_crc32c:#010x}"
                    )

    def read_window(
        self, segments: Iterable[Segment], windows: Sequence[FieldWindow]
    ) -> list[np.ndarray | None]:
        """One array per window (None where the field has no segment), in two passes."""
        plan = self._plan(segments, windows)
        offset_ranges = plan.offset_ranges()
        if offset_ranges:
            plan.take_offsets(self.store.read_ranges(offset_ranges))
        value_ranges = plan.value_ranges()
        if not value_ranges:
            return plan.assemble([])
        return plan.assemble(self.store.read_ranges(value_ranges, into=plan.value_destinations()))

    async def aread_window(
        self, segments: Iterable[Segment], windows: Sequence[FieldWindow]
    ) -> list[np.ndarray | None]:
        """Async `read_window`."""
        if self.verify:  # the checks read whole blobs: off the event loop
            plan = await asyncio.to_thread(self._plan, segments, windows)
        else:
            plan = self._plan(segments, windows)
        offset_ranges = plan.offset_ranges()
        if offset_ranges:
            plan.take_offsets(await self.store.aread_ranges(offset_ranges))
        value_ranges = plan.value_ranges()
        if not value_ranges:
            return plan.assemble([])
        return plan.assemble(
            await self.store.aread_ranges(value_ranges, into=plan.value_destinations())
        )

    def read_field(
        self,
        segments: Iterable[Segment],
        field: str,
        lo: int,
        hi: int,
        *,
        width: int | None = None,
    ) -> np.ndarray | None:
        """``field`` over ``[lo, hi)``; None when no segment carries the field."""
        (result,) = self.read_window(segments, [FieldWindow(field, lo, hi, width)])
        return result
