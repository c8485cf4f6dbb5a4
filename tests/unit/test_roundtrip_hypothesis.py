"""Property tests: writer + reader against an independent pure-numpy reference model.

The reference never looks at what the reader returns: it is built from the source arrays
each example generates, the positions the data model prescribes (routing end-anchored,
mask row i at ``prompt_len + i``) and clip/shift arithmetic done here on plain ints.
Examples are seeded by the settings profile of ``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from objstore_payload import (
    FIELDS,
    FieldWindow,
    InvalidSegmentError,
    PayloadReader,
    PayloadWriter,
    RequestArrays,
    Segment,
    Store,
    StoreConfig,
    codec,
)
from objstore_payload.dtypes import DTYPE_NAMES
from objstore_payload.segment import (
    MAX_BLOB_BYTES,
    MAX_DIM,
    MAX_POSITION,
    clip_segments,
    decode_segments_json,
    decode_segments_msgpack,
    encode_segments_json,
    encode_segments_msgpack,
    segments_from_builtins,
    segments_to_builtins,
    shift_segments,
)

ROUTING = "routed_experts"
WEIGHTS = "routed_expert_weights"
MASK = "sampling_mask"
LOGPROBS = "sampling_mask_logprobs"
ALL_FIELDS = (ROUTING, WEIGHTS, MASK, LOGPROBS)
"""In the writer's layout order."""
RAGGED_VALUE_DTYPES = {MASK: np.dtype("<i4"), LOGPROBS: np.dtype("<f4")}
MAX_SHIFT = 24


# -- the source side: one request's arrays, and what the data model says about them -------


@dataclass(frozen=True)
class Layout:
    """Where the model expects one field's region: ``rows`` rows from ``pos``."""

    pos: int
    rows: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def row_bytes(self) -> int:
        return np.dtype(self.dtype).itemsize * math.prod(self.shape)


@dataclass(frozen=True, eq=False)
class Request:
    prompt_len: int
    completion_len: int
    num_experts: int | None
    routing: np.ndarray | None
    weights: np.ndarray | None
    counts: np.ndarray | None
    ids: np.ndarray | None
    logprobs: np.ndarray | None

    def arrays(self) -> RequestArrays:
        return RequestArrays(
            prompt_len=self.prompt_len,
            completion_len=self.completion_len,
            routed_experts=self.routing,
            routed_expert_weights=self.weights,
            sampling_mask=None
            if self.counts is None or self.ids is None
            else (self.counts, self.ids),
            sampling_mask_logprobs=self.logprobs,
            num_experts=self.num_experts,
        )

    def routing_dtype(self) -> str:
        assert self.routing is not None
        if self.num_experts is not None:
            limit = self.num_experts
        else:
            limit = int(self.routing.max()) + 1 if self.routing.size else 1
        return "uint8" if limit <= 256 else "uint16"

    def layouts(self) -> dict[str, Layout]:
        """Every field the request carries, in layout order."""
        end = self.prompt_len + self.completion_len - 1  # the last token is never forwarded
        out: dict[str, Layout] = {}
        if self.routing is not None:
            n, layers, top_k = self.routing.shape
            out[ROUTING] = Layout(end - n, n, self.routing_dtype(), (layers, top_k))
        if self.weights is not None:
            n, layers, top_k = self.weights.shape
            out[WEIGHTS] = Layout(end - n, n, "float32", (layers, top_k))
        if self.counts is not None:
            out[MASK] = Layout(self.prompt_len, self.completion_len, "uint32", ())
        if self.logprobs is not None:
            out[LOGPROBS] = Layout(self.prompt_len, self.completion_len, "uint32", ())
        return out

    def fixed_rows(self, field: str) -> np.ndarray:
        if field == ROUTING:
            assert self.routing is not None
            return self.routing.astype(np.dtype(self.routing_dtype()).newbyteorder("<"))
        assert self.weights is not None
        return self.weights

    def ragged_rows(self, field: str) -> list[np.ndarray]:
        assert self.counts is not None
        source = self.ids if field == MASK else self.logprobs
        assert source is not None
        values = source.astype(RAGGED_VALUE_DTYPES[field])
        bounds = np.cumsum(self.counts.astype(np.int64))
        return np.split(values, bounds[:-1]) if self.counts.size else []


likely = st.sampled_from([True, True, True, False])
any_float32 = st.floats(width=32)
logprob_values = st.one_of(
    st.just(-math.inf),
    st.sampled_from([-1e30, -3.4028234663852886e38, -1e-45, -0.0, 0.0]),
    st.floats(-100.0, 0.0, width=32),
    any_float32,
)


@st.composite
def requests(draw: st.DrawFn) -> Request:
    prompt_len = draw(st.integers(0, 8))
    completion_len = draw(st.integers(0, 8))
    total = prompt_len + completion_len
    num_experts = draw(st.sampled_from([None, 8, 256, 257, 4096]))
    routing = weights = None
    if total >= 1:
        rows = draw(st.integers(0, total - 1))
        shape = (rows, draw(st.integers(1, 4)), draw(st.integers(1, 3)))
        if draw(likely):
            high = num_experts if num_experts is not None else draw(st.sampled_from([256, 65536]))
            dtype = draw(st.sampled_from([np.int64, np.int32, np.uint16]))
            routing = draw(hnp.arrays(dtype, shape, elements=st.integers(0, high - 1)))
        if draw(likely):
            weights = draw(hnp.arrays(np.float32, shape, elements=any_float32))
    counts = ids = logprobs = None
    if draw(likely):
        counts_dtype = draw(st.sampled_from([np.int64, np.int32]))
        counts = draw(hnp.arrays(counts_dtype, completion_len, elements=st.integers(0, 6)))
        n = int(counts.sum())
        ids = draw(hnp.arrays(np.int32, n, elements=st.integers(-(2**31), 2**31 - 1)))
        if draw(likely):
            logprobs = draw(hnp.arrays(np.float32, n, elements=logprob_values))
    return Request(prompt_len, completion_len, num_experts, routing, weights, counts, ids, logprobs)


# -- the micro batch: segments of several requests, clipped, shifted, overlapping ---------


@dataclass(frozen=True)
class Entry:
    """Take ``fields`` of request ``request``; optionally clip to ``clip`` (before the shift,
    in request positions, or after it, in micro-batch positions); shift by ``delta``."""

    request: int
    fields: tuple[str, ...]
    delta: int
    clip: tuple[int, int] | None
    clip_after_shift: bool
    helpers: bool
    """Use `clip_segments`/`shift_segments` instead of the `Segment` methods."""


@dataclass(frozen=True)
class Placed:
    """The model of one micro-batch segment: source rows ``[src, src + rows)`` of
    ``field`` of request ``request``, at micro-batch positions ``[pos, pos + rows)``."""

    field: str
    request: int
    src: int
    pos: int
    rows: int
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class WindowSpec:
    field: str
    lo: int
    hi: int
    extra_width: int | None
    """Ragged fields: force the width to (widest row in the window) + this."""


@dataclass(frozen=True)
class Scenario:
    requests: tuple[Request, ...]
    entries: tuple[Entry, ...]
    windows: tuple[WindowSpec, ...]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    reqs = draw(st.lists(requests(), min_size=1, max_size=4))
    entries: list[Entry] = []
    for _ in range(draw(st.integers(1, 6))):
        index = draw(st.integers(0, len(reqs) - 1))
        layouts = reqs[index].layouts()
        min_pos = min((lay.pos for lay in layouts.values()), default=0)
        fields: tuple[str, ...] = ALL_FIELDS
        if not draw(likely):
            fields = tuple(draw(st.lists(st.sampled_from(ALL_FIELDS), unique=True, max_size=4)))
        if draw(st.booleans()) and entries:  # near an earlier entry: overlaps
            delta = draw(st.sampled_from(entries)).delta + draw(st.integers(-3, 3))
            delta = min(max(delta, -min_pos), MAX_SHIFT)
        else:
            delta = draw(st.integers(-min_pos, MAX_SHIFT))
        clip = draw(st.none() | st.tuples(st.integers(0, 40), st.integers(0, 40)))
        entries.append(Entry(index, fields, delta, clip, draw(st.booleans()), draw(st.booleans())))
    placed = [p for e in entries for p in place(e, reqs[e.request]) if p.rows > 0]
    present = sorted({p.field for p in placed}, key=ALL_FIELDS.index)
    extent = max((p.pos + p.rows for p in placed), default=0)
    windows = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(likely) and present:
            field = draw(st.sampled_from(present))
        else:
            field = draw(st.sampled_from(ALL_FIELDS))
        lo = draw(st.integers(0, extent + 4))
        empty = draw(st.sampled_from([False, False, False, True]))
        hi = lo if empty else lo + draw(st.integers(0, extent + 8 - lo))
        extra = draw(st.none() | st.integers(0, 2))
        windows.append(WindowSpec(field, lo, hi, extra))
    return Scenario(tuple(reqs), tuple(entries), tuple(windows))


def place(entry: Entry, req: Request) -> list[Placed]:
    """The model of what an entry contributes, from its own arithmetic (rows == 0 kept
    when nothing clips them, since a shift keeps an empty segment)."""
    out = []
    for field, lay in req.layouts().items():
        if field not in entry.fields:
            continue
        pos, end = lay.pos, lay.pos + lay.rows
        if entry.clip is None:
            start, stop = pos, end
        elif entry.clip_after_shift:  # the window is in micro-batch positions
            a, b = entry.clip
            start = max(pos + entry.delta, a) - entry.delta
            stop = min(end + entry.delta, b) - entry.delta
        else:  # the window is in request positions
            a, b = entry.clip
            start, stop = max(pos, a), min(end, b)
        if entry.clip is not None and start >= stop:
            continue
        out.append(
            Placed(
                field,
                entry.request,
                start - pos,
                start + entry.delta,
                stop - start,
                lay.dtype,
                lay.shape,
            )
        )
    return out


def apply_entry(entry: Entry, written: Sequence[Segment]) -> list[Segment]:
    """What the library makes of an entry."""
    chosen = [seg for seg in written if seg.field in entry.fields]
    d = entry.delta

    def shift(segs: list[Segment]) -> list[Segment]:
        return shift_segments(segs, d) if entry.helpers else [s.shift(d) for s in segs]

    def clip(segs: list[Segment]) -> list[Segment]:
        assert entry.clip is not None
        a, b = entry.clip
        if entry.helpers:
            return clip_segments(segs, a, b)
        return [c for s in segs if (c := s.clip(a, b)) is not None]

    if entry.clip is None:
        return shift(chosen)
    if entry.clip_after_shift:
        return clip(shift(chosen))
    return shift(clip(chosen))


def micro_batch(
    scenario: Scenario, written: Sequence[Sequence[Segment]]
) -> tuple[list[Segment], list[Placed]]:
    """The micro-batch segments of one store, checked against the model's placement."""
    segments: list[Segment] = []
    placed: list[Placed] = []
    for entry in scenario.entries:
        req = scenario.requests[entry.request]
        originals = {seg.field: seg for seg in written[entry.request]}
        got = apply_entry(entry, written[entry.request])
        want = place(entry, req)
        assert [(s.field, s.pos, s.rows) for s in got] == [
            (p.field, p.pos, p.rows) for p in want
        ], entry
        for seg, model in zip(got, want, strict=True):
            orig = originals[seg.field]
            lay = req.layouts()[seg.field]
            assert seg.uri == orig.uri
            assert (seg.dtype, seg.shape) == (lay.dtype, lay.shape)
            assert seg.offset == orig.offset + model.src * lay.row_bytes
        segments.extend(got)
        placed.extend(want)
    return segments, placed


# -- the reference model ----------------------------------------------------------------


def covered(p: Placed, lo: int, hi: int) -> tuple[int, int]:
    return max(p.pos, lo), min(p.pos + p.rows, hi)


def ragged_width_needed(
    scenario: Scenario, placed: Sequence[Placed], field: str, lo: int, hi: int
) -> int:
    """Widest row of ``field`` among the placed segments' rows inside ``[lo, hi)``."""
    widest = 0
    for p in placed:
        if p.field != field or p.rows == 0:
            continue
        rows = scenario.requests[p.request].ragged_rows(field)
        start, stop = covered(p, lo, hi)
        for t in range(start, stop):
            widest = max(widest, rows[p.src + t - p.pos].size)
    return max(widest, 1)


def reference(
    scenario: Scenario,
    placed: Sequence[Placed],
    field: str,
    lo: int,
    hi: int,
    width: int | None,
) -> np.ndarray | None:
    spec = FIELDS[field]
    # Zero-row segments read nothing but mark the field present (fill output).
    present = [p for p in placed if p.field == field]
    if not present:
        return None
    segs = [p for p in present if p.rows > 0]
    n = hi - lo
    if spec.ragged:
        if width is None:
            width = ragged_width_needed(scenario, segs, field, 0, MAX_POSITION + 1)
        out = np.full((n, width), spec.fill, dtype=RAGGED_VALUE_DTYPES[field])
        for p in segs:
            rows = scenario.requests[p.request].ragged_rows(field)
            start, stop = covered(p, lo, hi)
            for t in range(start, stop):
                row = rows[p.src + t - p.pos]
                out[t - lo] = spec.fill
                out[t - lo, : row.size] = row
        return out
    shape = tuple(max(dims) for dims in zip(*(p.shape for p in present), strict=True))
    dtype = np.result_type(*(np.dtype(p.dtype) for p in present))
    out = np.full((n, *shape), spec.fill, dtype=dtype)
    for p in segs:
        source = scenario.requests[p.request].fixed_rows(field)
        start, stop = covered(p, lo, hi)
        if start >= stop:
            continue
        block = source[p.src + start - p.pos : p.src + stop - p.pos]
        target = out[start - lo : stop - lo]
        target[...] = spec.fill
        target[(slice(None), *(slice(0, d) for d in p.shape))] = block
    return out


def assert_bitwise(got: np.ndarray | None, want: np.ndarray | None, what: str) -> None:
    if want is None:
        assert got is None, f"{what}: expected None, got {got!r}"
        return
    assert got is not None, f"{what}: got None, expected {want!r}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.tobytes() == want.tobytes(), f"{what}:\n got {got!r}\nwant {want!r}"


def note_features(
    scenario: Scenario, placed: Sequence[Placed], windows: Sequence[FieldWindow]
) -> None:
    """Label the example (``--hypothesis-show-statistics``) so that coverage is visible."""
    live = [p for p in placed if p.rows > 0]
    for field in ALL_FIELDS:
        segs = [p for p in live if p.field == field]
        if any(
            covered(a, b.pos, b.pos + b.rows)[0] < covered(a, b.pos, b.pos + b.rows)[1]
            for i, a in enumerate(segs)
            for b in segs[i + 1 :]
        ):
            event(f"{field}: overlapping segments")
        if len({p.shape for p in segs}) > 1:
            event(f"{field}: segments of differing row shapes")
        if len({p.dtype for p in segs}) > 1:
            event(f"{field}: segments of differing dtypes")
        if FIELDS[field].ragged:
            last: dict[int, int] = {}
            for p in segs:
                rows = scenario.requests[p.request].ragged_rows(field)
                for t in range(p.pos, p.pos + p.rows):
                    width = rows[p.src + t - p.pos].size
                    if width < last.get(t, -1):
                        event(f"{field}: a later narrower row replaces a wider one")
                    last[t] = width
    for w in windows:
        segs = [p for p in live if p.field == w.field]
        if not segs:
            event("window of a field with no segments")
        elif w.lo == w.hi:
            event("empty window")
        elif w.lo >= max(p.pos + p.rows for p in segs):
            event("window past all data")
        elif all(covered(p, w.lo, w.hi)[0] >= covered(p, w.lo, w.hi)[1] for p in segs):
            event("window covering only gaps")
        else:
            event("window with data")
        if w.width is not None:
            event("forced ragged width")


# -- stores ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def file_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Hypothesis runs many examples per test call: each takes a fresh root under here."""
    return tmp_path_factory.mktemp("roundtrip")


@dataclass
class Stores:
    memory: Store
    file: Store

    def __iter__(self) -> Iterator[Store]:
        return iter((self.memory, self.file))


def open_stores(file_base: Path) -> Stores:
    name = f"rt-{uuid.uuid4().hex}"
    return Stores(
        Store(StoreConfig(root=f"memory://{name}")),
        Store(StoreConfig(root=(file_base / name).as_uri())),
    )


def close_stores(stores: Stores) -> None:
    stores.memory.delete(stores.memory.list())  # the memory filesystem is process-global
    for store in stores:
        store.close()


# -- 1-4: writer, micro batch, windows, reference ---------------------------------------


@given(scenario=scenarios())
def test_window_reads_match_the_numpy_reference(file_base: Path, scenario: Scenario) -> None:
    stores = open_stores(file_base)
    try:
        for store in stores:
            writer, reader = PayloadWriter(store), PayloadReader(store)
            written = [writer.write(store.root.url, req.arrays()) for req in scenario.requests]
            # The writer's segments are where the data model says.
            for req, segs in zip(scenario.requests, written, strict=True):
                layouts = req.layouts()
                assert [s.field for s in segs] == list(layouts)
                for seg in segs:
                    lay = layouts[seg.field]
                    assert (seg.pos, seg.rows, seg.dtype, seg.shape) == (
                        lay.pos,
                        lay.rows,
                        lay.dtype,
                        lay.shape,
                    ), seg
            segments, placed = micro_batch(scenario, written)

            windows = []
            for spec in scenario.windows:
                width = None
                if FIELDS[spec.field].ragged and spec.extra_width is not None:
                    needed = ragged_width_needed(scenario, placed, spec.field, spec.lo, spec.hi)
                    width = needed + spec.extra_width
                windows.append(FieldWindow(spec.field, spec.lo, spec.hi, width))
            wants = [reference(scenario, placed, w.field, w.lo, w.hi, w.width) for w in windows]

            if store is stores.memory:
                note_features(scenario, placed, windows)
            got = reader.read_window(segments, windows)
            assert len(got) == len(windows)
            for window, g, want in zip(windows, got, wants, strict=True):
                assert_bitwise(g, want, f"{store.root.protocol} {window}")
            agot = asyncio.run(reader.aread_window(segments, windows))
            for window, g, want in zip(windows, agot, wants, strict=True):
                assert_bitwise(g, want, f"async {store.root.protocol} {window}")
            # A forced width narrower than a row inside the window is refused.
            for window in windows:
                if not FIELDS[window.field].ragged or not any(
                    p.field == window.field and p.rows for p in placed
                ):
                    continue
                needed = ragged_width_needed(scenario, placed, window.field, window.lo, window.hi)
                if needed > 1:
                    narrow = FieldWindow(window.field, window.lo, window.hi, needed - 1)
                    with pytest.raises(InvalidSegmentError, match="wider than width"):
                        reader.read_window(segments, [narrow])
    finally:
        close_stores(stores)


@given(
    first=requests(),
    second=requests(),
    delta=st.integers(-4, 4),
    lo=st.integers(0, 20),
    length=st.integers(0, 24),
)
def test_later_overlapping_segment_wins_field_by_field(
    file_base: Path, first: Request, second: Request, delta: int, lo: int, length: int
) -> None:
    """Two whole requests stacked at nearly the same place: every row the second covers
    is the second's (a narrower ragged or fixed row resets the wider one first)."""
    scenario = Scenario(
        (first, second),
        (
            Entry(0, ALL_FIELDS, 0, None, False, False),
            Entry(
                1,
                ALL_FIELDS,
                max(delta, -min((lay.pos for lay in second.layouts().values()), default=0)),
                None,
                False,
                True,
            ),
        ),
        tuple(WindowSpec(f, lo, lo + length, None) for f in ALL_FIELDS),
    )
    stores = open_stores(file_base)
    try:
        store = stores.memory
        writer = PayloadWriter(store)
        written = [writer.write(store.root.url, req.arrays()) for req in scenario.requests]
        segments, placed = micro_batch(scenario, written)
        windows = [FieldWindow(w.field, w.lo, w.hi) for w in scenario.windows]
        got = PayloadReader(store).read_window(segments, windows)
        for window, g in zip(windows, got, strict=True):
            want = reference(scenario, placed, window.field, window.lo, window.hi, None)
            assert_bitwise(g, want, str(window))
    finally:
        close_stores(stores)


# -- 5: segment arithmetic and wire forms ------------------------------------------------


@st.composite
def segments(draw: st.DrawFn) -> Segment:
    field = draw(st.sampled_from(ALL_FIELDS) | st.from_regex(r"\A[a-z][a-z0-9_]{0,63}\Z"))
    uri = draw(st.text(min_size=1, max_size=40))
    dtype = draw(st.sampled_from(sorted(DTYPE_NAMES)))
    dim = st.integers(1, 8) | st.integers(1, MAX_DIM)
    shape = tuple(draw(st.lists(dim, max_size=4)))
    row_bytes = np.dtype(dtype).itemsize * math.prod(shape)
    rows = draw(st.integers(0, min(1000, MAX_BLOB_BYTES // row_bytes)))
    offset = draw(st.integers(0, MAX_BLOB_BYTES - rows * row_bytes))
    pos = draw(st.integers(0, 100) | st.integers(0, MAX_POSITION - rows))
    return Segment(field, uri, offset, pos, rows, dtype, shape)


@given(seg=segments(), data=st.data())
def test_clip_and_shift_arithmetic(seg: Segment, data: st.DataObject) -> None:
    near = st.integers(max(0, seg.pos - 5), seg.end + 5)
    lo = data.draw(near | st.integers(0, MAX_POSITION + 1), label="lo")
    hi = data.draw(near | st.integers(0, MAX_POSITION + 1), label="hi")
    low, high = -seg.pos, MAX_POSITION - seg.end
    delta = data.draw(st.integers(max(low, -30), min(high, 30)) | st.integers(low, high), "d")
    row_bytes = np.dtype(seg.dtype).itemsize * math.prod(seg.shape)

    # The model: positions [max(pos, lo), min(end, hi)), whole rows off the offset.
    start, stop = max(seg.pos, lo), min(seg.end, hi)
    want = (
        None
        if start >= stop
        else Segment(
            seg.field,
            seg.uri,
            seg.offset + (start - seg.pos) * row_bytes,
            start,
            stop - start,
            seg.dtype,
            seg.shape,
        )
    )
    clipped = seg.clip(lo, hi)
    assert clipped == want
    if clipped is not None:
        assert seg.pos <= clipped.pos
        assert clipped.end <= seg.end
        assert lo <= clipped.pos
        assert clipped.end <= hi
        assert clipped.rows >= 1
        assert seg.byte_range[0] <= clipped.byte_range[0]
        assert clipped.byte_range[1] <= seg.byte_range[1]
        assert clipped.nbytes == clipped.rows * row_bytes
        assert clipped.clip(lo, hi) == clipped
    # Clip, then shift == shift, then clip on the shifted window.
    shifted = seg.shift(delta)
    assert (shifted.pos, shifted.rows, shifted.offset) == (seg.pos + delta, seg.rows, seg.offset)
    other = shifted.clip(lo + delta, hi + delta)
    assert (None if clipped is None else clipped.shift(delta)) == other
    assert shifted.shift(-delta) == seg
    assert seg.shift(0) is seg
    # Clipping twice is clipping to the intersection.
    lo2, hi2 = data.draw(near, "lo2"), data.draw(near, "hi2")
    twice = None if clipped is None else clipped.clip(lo2, hi2)
    assert twice == seg.clip(max(lo, lo2), min(hi, hi2))
    # A shift below position 0 is refused.
    with pytest.raises(InvalidSegmentError):
        seg.shift(-seg.pos - 1)
    with pytest.raises(InvalidSegmentError):
        shift_segments([seg], -seg.pos - 1)
    with pytest.raises(InvalidSegmentError):  # and so is one past the largest position
        seg.shift(MAX_POSITION - seg.end + 1)

    # List helpers agree with the methods, and every form survives the wire.
    batch = [seg, shifted, *([clipped] if clipped else []), *([other] if other else [])]
    assert clip_segments(batch, lo, hi) == [c for s in batch if (c := s.clip(lo, hi))]
    assert shift_segments(batch, 0) == batch
    assert decode_segments_msgpack(encode_segments_msgpack(batch)) == batch
    assert decode_segments_json(encode_segments_json(batch)) == batch
    assert decode_segments_json(encode_segments_json(batch).decode()) == batch
    builtins = msgspec.json.decode(msgspec.json.encode(segments_to_builtins(batch)))
    assert segments_from_builtins(builtins) == batch
    for decoded in decode_segments_msgpack(encode_segments_msgpack(batch)):
        assert type(decoded.shape) is tuple


# -- 6: the inline codec -----------------------------------------------------------------


def wire_forms(packed: codec.PackedArray | codec.PackedRouting | codec.PackedMask) -> list[object]:
    """The packed value itself, its builtins, and both through real JSON and msgpack."""
    builtins = codec.to_builtins(packed)
    return [
        packed,
        builtins,
        msgspec.json.decode(msgspec.json.encode(builtins)),
        msgspec.json.decode(msgspec.json.encode(packed)),
        msgspec.msgpack.decode(msgspec.msgpack.encode(packed)),
    ]


def little_endian_bytes(array: np.ndarray, name: str) -> bytes:
    return np.ascontiguousarray(array).astype(np.dtype(name).newbyteorder("<")).tobytes()


@given(name=st.sampled_from(sorted(DTYPE_NAMES)), data=st.data())
def test_codec_array_round_trip_every_dtype(name: str, data: st.DataObject) -> None:
    big_endian = data.draw(st.booleans(), "big_endian")
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5), "shape")
    array = data.draw(
        hnp.arrays(np.dtype(name).newbyteorder(">" if big_endian else "<"), shape), "array"
    )
    if array.ndim >= 2 and data.draw(st.booleans(), "transpose"):
        array = array.T  # not C-contiguous
    expected = little_endian_bytes(array, name)
    packed = codec.encode_array(array)
    assert (packed.dtype, packed.shape, packed.data) == (name, array.shape, expected)
    for form in wire_forms(packed):
        decoded = codec.decode_array(form)
        assert decoded.dtype == np.dtype(name).newbyteorder("<")
        assert decoded.shape == array.shape
        assert decoded.tobytes() == expected
        assert not decoded.flags.writeable


@given(
    name=st.sampled_from(sorted(codec.ROUTING_DTYPES)),
    rows=st.integers(0, 6),
    layers=st.integers(1, 4),
    top_k=st.integers(1, 3),
    start=st.integers(0, MAX_POSITION),
    data=st.data(),
)
def test_codec_routing_round_trip(
    name: str, rows: int, layers: int, top_k: int, start: int, data: st.DataObject
) -> None:
    high = int(np.iinfo(np.dtype(name)).max)
    elements = st.integers(0, high)
    array = data.draw(hnp.arrays(np.dtype(name), (rows, layers, top_k), elements=elements))
    packed = codec.encode_routing(array, start)
    for form in wire_forms(packed):
        decoded, got_start = codec.decode_routing(form)
        assert got_start == start
        assert decoded.dtype == np.dtype(name).newbyteorder("<")
        assert decoded.shape == array.shape
        assert decoded.tobytes() == little_endian_bytes(array, name)


@given(
    counts=st.lists(st.integers(0, 6), max_size=12),
    counts_dtype=st.sampled_from([np.int32, np.int64, np.uint16]),
    data=st.data(),
)
def test_codec_mask_and_logprobs_round_trip(
    counts: list[int], counts_dtype: type, data: st.DataObject
) -> None:
    n = sum(counts)
    ids = data.draw(hnp.arrays(np.int64, n, elements=st.integers(-(2**31), 2**31 - 1)), label="ids")
    logprobs = data.draw(hnp.arrays(np.float32, n, elements=logprob_values), label="logprobs")
    packed = codec.encode_mask(np.array(counts, dtype=counts_dtype), ids)
    for form in wire_forms(packed):
        got_counts, got_ids = codec.decode_mask(form)
        assert got_counts.dtype == np.dtype("<i4")
        assert got_ids.dtype == np.dtype("<i4")
        assert got_counts.tolist() == counts
        assert got_ids.tolist() == ids.tolist()
    for form in wire_forms(codec.encode_logprobs(logprobs)):
        got = codec.decode_logprobs(form)
        assert got.dtype == np.dtype("<f4")
        assert got.tobytes() == logprobs.astype("<f4").tobytes()
