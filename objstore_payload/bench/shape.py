"""The shape of a run or of one benchmark workload: samples, turns, routing and masks.

One `RunShape` drives the synthetic workloads of the ``batch``, ``read`` and ``latency``
scenarios and the ``plan`` capacity model, so the model's request and byte counts can be
checked against what the reader actually does for the same shape.

Each sample is ``turns`` requests of equal length, one blob each; a turn's blob holds the
routing of its own tokens (``n - 1`` rows, as a server writes for a request of ``n``
forwarded tokens) and the sampling mask of its completion tokens. Later turns of a real
trace re-send the earlier context as prompt, and a server also writes that context's
routing; the sample's segments skip those rows, so they change the bytes stored but not
what the trainer reads. The workloads do not store them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

__all__ = ["BATCH_SHAPE", "READ_SHAPE", "RunShape"]


@dataclass(frozen=True)
class RunShape:
    """A batch of samples and how it is trained on."""

    samples: int = 8
    """Samples per step (the batch size)."""
    tokens_per_sample: int = 4000
    turns: int = 4
    """Requests per sample; each writes one blob."""
    completion_share: float = 0.4
    """Share of each turn's tokens that are completion tokens (they carry a mask row)."""
    mask: Literal["poisson", "uniform"] = "poisson"
    """``poisson``: ids per completion token ~ Poisson(``mask_ids``) (vLLM top-p / top-k
    masks are short); ``uniform``: 1 to ``mask_max_ids`` ids per masked token."""
    mask_ids: float = 1.7
    mask_max_ids: int = 64
    layers: int = 48
    top_k: int = 8
    experts: int = 128
    dp: int = 1
    cp: int = 4
    seq_len: int | None = None
    """Micro batch length; default: every sample in one micro batch."""

    def __post_init__(self) -> None:
        if min(self.samples, self.tokens_per_sample, self.turns, self.dp, self.cp) < 1:
            raise ValueError("samples, tokens, turns, dp and cp must be positive")
        if self.tokens_per_sample < 2 * self.turns:
            raise ValueError("each turn needs at least two tokens")
        if not 0.0 < self.completion_share < 1.0:
            raise ValueError("completion_share must lie in (0, 1)")

    @property
    def mean_mask_ids(self) -> float:
        """Mean ids per completion token."""
        return self.mask_ids if self.mask == "poisson" else (1 + self.mask_max_ids) / 2

    @property
    def routing_dtype(self) -> np.dtype[Any]:
        """uint8 up to 256 experts, else uint16 (the writer's compaction)."""
        return np.dtype(np.uint8 if self.experts <= 256 else np.uint16)

    @property
    def routing_row_bytes(self) -> int:
        """Bytes of one token's routing row."""
        return self.layers * self.top_k * self.routing_dtype.itemsize

    @property
    def micro_batch_len(self) -> int:
        """Tokens per micro batch before CP padding."""
        return self.seq_len or self.samples * self.tokens_per_sample

    def turn_lengths(self) -> list[tuple[int, int]]:
        """``(prompt, completion)`` tokens of each turn of a sample."""
        base, extra = divmod(self.tokens_per_sample, self.turns)
        out = []
        for turn in range(self.turns):
            n = base + (1 if turn < extra else 0)
            completion = min(max(1, round(n * self.completion_share)), n - 1)
            out.append((n - completion, completion))
        return out

    def mask_counts(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        """Ids per completion token for ``rows`` tokens (int32)."""
        if self.mask == "poisson":
            return rng.poisson(self.mask_ids, rows).astype(np.int32)
        return rng.integers(1, self.mask_max_ids + 1, rows, dtype=np.int32)

    def describe(self) -> dict[str, Any]:
        """The shape as JSON-ready builtins."""
        return asdict(self)

    def scaled(self, scale: float) -> RunShape:
        """Fewer samples (at least one) for a smaller run; ``seq_len`` scales with them
        when it spans several samples."""
        samples = max(1, round(self.samples * scale))
        seq_len = self.seq_len
        if seq_len is not None and seq_len > self.tokens_per_sample:
            seq_len = max(self.tokens_per_sample, round(seq_len * samples / self.samples))
        return RunShape(**{**asdict(self), "samples": samples, "seq_len": seq_len})


READ_SHAPE = RunShape()
"""The ``read`` scenario's micro batch: 8 samples of 4 turns of 1,000 tokens (600 prompt,
400 completion), one 32,000-token micro batch, CP 4, masks ~1.7 ids per token."""

BATCH_SHAPE = RunShape(
    samples=64,
    tokens_per_sample=32_768,
    turns=30,
    completion_share=0.2,
    mask="uniform",
    mask_max_ids=64,
    dp=8,
    cp=4,
    seq_len=32_768,
)
"""The seed's synthetic huge batch: 64 samples of 32k tokens, 48 x 8 uint8 routing, 30
turns each, masks of up to 64 ids on 20 % of the tokens, 8 DP ranks x CP 4."""
