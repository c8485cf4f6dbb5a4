"""From requests to samples: multi-turn traces, and prefill/decode routing stitching.

A trace is the list of requests (turns) of one rollout. A turn whose prompt extends the
previous turn's prompt and completion continues the same sample; any other turn starts a
new one. Each turn's routing rows are end-anchored in its own sequence, and later turns
send only the rows after ``routed_experts_prompt_start`` (the previous turn's final
position), so the turns of a sample together cover ``[0, n - 1)``. The final position is
never forwarded; its row repeats the previous one (a 1-row segment pointing at that row's
bytes, or the copied row inline). A sample whose routing has any other gap loses its
routing, with a logged warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np

from objstore_payload.adapters.rollout import Sample, make_sample
from objstore_payload.errors import InvalidPayloadError
from objstore_payload.fields import FIELDS
from objstore_payload.segment import Segment
from objstore_payload.writer import routing_start

__all__ = ["Turn", "stitch_prefill_decode", "trace_to_samples"]

log = logging.getLogger(__name__)

_ROUTING = ("routed_experts", "routed_expert_weights")


@dataclass(frozen=True)
class Turn:
    """One request of a trace, as the client decoded its response.

    Per field, the payload is inline (arrays) or in ``segments`` (positions in this
    request's own sequence, prompt first). Inline routing rows are end-anchored like the
    segments: they end at the request's last forwarded token.
    """

    prompt_ids: np.ndarray
    completion_ids: np.ndarray
    routed_experts: np.ndarray | None = None
    routed_expert_weights: np.ndarray | None = None
    sampling_mask: tuple[np.ndarray, np.ndarray] | None = None
    """CSR ``(counts, ids)``, one count per completion token."""
    sampling_mask_logprobs: np.ndarray | None = None
    """float32, parallel to the mask's ids."""
    segments: tuple[Segment, ...] = field(default=())
    completion_logprobs: np.ndarray | None = None
    """float32 logprob of each sampled token (always inline: 4 B per token)."""

    @property
    def length(self) -> int:
        """Tokens in this request's sequence."""
        return int(self.prompt_ids.size + self.completion_ids.size)


def _extends(previous: np.ndarray, prompt: np.ndarray) -> bool:
    return prompt.size >= previous.size and bool(np.array_equal(prompt[: previous.size], previous))


def trace_to_samples(turns: Sequence[Turn], *, trace_id: str = "") -> list[Sample]:
    """The samples of one trace (see module doc)."""
    groups: list[list[Turn]] = []
    tokens = np.zeros(0, np.int32)
    for turn in turns:
        if groups and _extends(tokens, np.asarray(turn.prompt_ids)):
            groups[-1].append(turn)
        else:
            groups.append([turn])
        tokens = np.concatenate([turn.prompt_ids, turn.completion_ids]).astype(np.int32)
    return [_group_to_sample(group, trace_id) for group in groups]


def _covers(intervals: Iterable[tuple[int, int]], end: int) -> bool:
    """Whether the intervals cover ``[0, end)`` without a gap."""
    reach = 0
    for lo, hi in sorted(intervals):
        if lo > reach:
            return False
        reach = max(reach, hi)
    return reach >= end


def _group_to_sample(turns: Sequence[Turn], trace_id: str) -> Sample:
    last = turns[-1]
    token_ids = np.concatenate([last.prompt_ids, last.completion_ids]).astype(np.int32)
    n = token_ids.size
    loss_mask = np.zeros(n, np.uint8)
    for turn in turns:
        loss_mask[turn.prompt_ids.size : turn.length] = 1
    arrays: dict[str, object] = {}
    segments: list[Segment] = []

    for name in _ROUTING:
        inline = [getattr(t, name) for t in turns]
        segs = [s for t in turns for s in t.segments if s.field == name]
        if all(a is None for a in inline) and not segs:
            continue
        if segs and any(a is not None for a in inline):
            log.warning("trace %s: %s mixes inline and segments; dropped", trace_id, name)
            continue
        if segs:
            covered = _covers(((s.pos, s.end) for s in segs), n - 1)
            if covered and n >= 2:
                segments += segs
                segments.append(_repeat_row(segs, n - 2, n - 1))
            elif covered:
                segments += segs
            else:
                log.warning("trace %s: %s segments leave a gap; routing dropped", trace_id, name)
            continue
        if any(a is None for a in inline):
            log.warning("trace %s: a turn has no %s; routing dropped", trace_id, name)
            continue
        rows = _assemble_inline_rows(turns, name, n)
        if rows is None:
            log.warning("trace %s: %s rows leave a gap; routing dropped", trace_id, name)
        else:
            arrays[name] = rows

    for name in ("sampling_mask", "sampling_mask_logprobs"):
        segs = [s for t in turns for s in t.segments if s.field == name]
        segments += segs
        if not any(getattr(t, name) is not None for t in turns):
            continue
        counts = np.zeros(n, np.int32)
        values = []
        for turn in turns:
            mask = turn.sampling_mask
            if mask is None or getattr(turn, name) is None:
                continue
            turn_counts = np.asarray(mask[0], np.int32)
            if turn_counts.size != turn.completion_ids.size:
                raise InvalidPayloadError("a turn's mask needs one count per completion token")
            counts[turn.prompt_ids.size : turn.length] = turn_counts
            values.append(
                np.asarray(mask[1], np.int32)
                if name == "sampling_mask"
                else np.asarray(turn.sampling_mask_logprobs, np.float32)
            )
        dtype = np.int32 if name == "sampling_mask" else np.float32
        arrays[name] = (counts, np.concatenate(values) if values else np.zeros(0, dtype))

    if segments and arrays:
        # Turns that mixed transports (a destination on some requests only): keep what
        # the server persisted, drop the inline fields, and say so.
        log.warning(
            "trace %s: payload came partly inline (%s) and partly by segments; "
            "the inline fields are dropped",
            trace_id,
            ", ".join(sorted(arrays)),
        )
        arrays = {}
    return make_sample(token_ids, loss_mask, segments=segments, **arrays)  # type: ignore[arg-type]


def _repeat_row(segs: Sequence[Segment], source: int, target: int) -> Segment:
    """A 1-row segment at ``target`` pointing at the bytes of row ``source`` (the last
    segment covering it wins, as it does when reading)."""
    for seg in reversed(segs):
        row = seg.clip(source, source + 1)
        if row is not None:
            return msgspec.structs.replace(row, pos=target)
    raise AssertionError("source row not covered")  # callers check coverage first


def _assemble_inline_rows(turns: Sequence[Turn], name: str, n: int) -> np.ndarray | None:
    first: np.ndarray = getattr(turns[0], name)
    out = np.zeros((n, *first.shape[1:]), dtype=first.dtype)
    covered = np.zeros(n, bool)
    for turn in turns:
        rows: np.ndarray = getattr(turn, name)
        if rows.shape[1:] != first.shape[1:]:
            return None
        start = routing_start(turn.prompt_ids.size, turn.completion_ids.size, rows.shape[0])
        out[start : start + rows.shape[0]] = rows
        covered[start : start + rows.shape[0]] = True
    if n >= 2:
        if not covered[: n - 1].all():
            return None
        out[n - 1] = out[n - 2]
    return out


def stitch_prefill_decode(
    prefill: Sequence[Segment], decode: Sequence[Segment], *, field: str = "routed_experts"
) -> list[Segment]:
    """One covering list of ``field`` segments for a request served by a prefill and a
    decode instance. The decode instance emits rows from its first forward, so its rows
    win from their first position on; the prefill rows before that are kept. Raises
    `InvalidPayloadError` if the result leaves a gap."""
    if field not in FIELDS:
        raise InvalidPayloadError(f"unknown field {field!r}")
    pre = [s for s in prefill if s.field == field]
    dec = [s for s in decode if s.field == field]
    if not dec:
        return list(pre)
    first = min(s.pos for s in dec)
    stitched = [c for s in pre if (c := s.clip(0, first)) is not None] + sorted(
        dec, key=lambda s: s.pos
    )
    end = max(s.end for s in stitched)
    if not _covers(((s.pos, s.end) for s in stitched), end):
        raise InvalidPayloadError(f"prefill and decode {field} segments leave a gap")
    return stitched
