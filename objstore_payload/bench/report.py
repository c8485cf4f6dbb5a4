"""What every benchmark scenario hands back, and how it is shown: a table on stdout, JSON
files and a PNG of inline versus by handle.

A scenario returns a `Report`: its figures (a label, the value as shown, the goal and
whether it was met), the raw numbers for the JSON file, and optionally pairs of inline
and by-handle values for the plot. Nothing here measures anything.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TextIO

__all__ = ["Figure", "Pair", "Progress", "Report", "format_report", "write_results"]


@dataclass(frozen=True)
class Figure:
    """One line of a scenario's table."""

    label: str
    value: str
    goal: str = ""
    met: bool | None = None
    """True or False when the figure has a goal; None otherwise."""


@dataclass(frozen=True)
class Pair:
    """An inline value and its by-handle counterpart, for the plot."""

    metric: str
    unit: str
    inline: float
    by_handle: float


@dataclass
class Report:
    """A scenario's results."""

    scenario: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    pairs: list[Pair] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, label: str, value: str, goal: str = "", met: bool | None = None) -> None:
        """Append a figure."""
        self.figures.append(Figure(label, value, goal, met))

    def as_json(self) -> dict[str, Any]:
        """Everything, as JSON-ready builtins."""
        return {
            "scenario": self.scenario,
            "title": self.title,
            "figures": [asdict(f) for f in self.figures],
            "pairs": [asdict(p) for p in self.pairs],
            "notes": self.notes,
            "data": self.data,
        }


def format_report(report: Report) -> str:
    """The scenario's table: figure, value, goal (and met / MISSED)."""
    width = max([len(f.label) for f in report.figures] + [6])
    value_width = max([len(f.value) for f in report.figures] + [5])
    lines = [f"== {report.scenario}: {report.title}"]
    for fig in report.figures:
        verdict = "" if fig.met is None else ("met" if fig.met else "MISSED")
        goal = f"goal {fig.goal}: {verdict}" if fig.goal else ""
        lines.append(f"  {fig.label:<{width}}  {fig.value:>{value_width}}  {goal}".rstrip())
    lines.extend(f"  note: {note}" for note in report.notes)
    return "\n".join(lines)


def _json_default(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def write_results(reports: list[Report], out: Path) -> list[Path]:
    """``<scenario>.json`` per report, ``results.json`` with all of them, and
    ``bench.png`` (inline versus by handle) when a report has pairs and matplotlib is
    installed. Returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for report in reports:
        path = out / f"{report.scenario}.json"
        path.write_text(json.dumps(report.as_json(), indent=2, default=_json_default))
        written.append(path)
    combined = out / "results.json"
    combined.write_text(
        json.dumps(
            {"reports": [r.as_json() for r in reports], "written_at": time.time()},
            indent=2,
            default=_json_default,
        )
    )
    written.append(combined)
    plot = plot_pairs(reports, out / "bench.png")
    if plot is not None:
        written.append(plot)
    return written


def plot_pairs(reports: list[Report], path: Path) -> Path | None:
    """Horizontal bars, inline against by handle, one panel per scenario with pairs (log
    scale: the two differ by orders of magnitude). None without matplotlib or pairs."""
    with_pairs = [r for r in reports if r.pairs]
    if not with_pairs:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = sum(len(r.pairs) for r in with_pairs)
    fig, axes = plt.subplots(
        len(with_pairs),
        1,
        figsize=(9, 1.2 + 0.7 * rows),
        squeeze=False,
        gridspec_kw={"height_ratios": [len(r.pairs) for r in with_pairs]},
    )
    for ax, report in zip(axes[:, 0], with_pairs, strict=True):
        labels = [f"{p.metric} ({p.unit})" for p in report.pairs]
        y = range(len(report.pairs))
        inline = [max(p.inline, 1e-9) for p in report.pairs]
        handle = [max(p.by_handle, 1e-9) for p in report.pairs]
        ax.barh([i + 0.2 for i in y], inline, height=0.4, label="inline", color="#c44e52")
        ax.barh([i - 0.2 for i in y], handle, height=0.4, label="by handle", color="#4c72b0")
        for i, (a, b) in enumerate(zip(inline, handle, strict=True)):
            ax.text(a, i + 0.2, f" {_short(a)}", va="center", fontsize=8)
            ax.text(b, i - 0.2, f" {_short(b)}  ({_short(a / b)}x)", va="center", fontsize=8)
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()
        ax.set_xscale("log")
        title = textwrap.shorten(f"{report.scenario}: {report.title}", 95, placeholder=" ...")
        ax.set_title(title, fontsize=10, loc="left")
        ax.legend(loc="lower right", fontsize=8)
        ax.margins(x=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _short(value: float) -> str:
    """A bar label: 3 significant digits without scientific notation."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


class Progress:
    """A progress bar on stderr for a long phase (a bar on a terminal, start and end
    lines otherwise, nothing when quiet)."""

    def __init__(
        self, label: str, total: int, *, quiet: bool = False, stream: TextIO | None = None
    ) -> None:
        self.label, self.total, self.done = label, max(total, 1), 0
        self._stream = sys.stderr if stream is None else stream
        self._quiet = quiet
        self._tty = self._stream.isatty()
        self._started = time.perf_counter()
        self._shown = -1.0

    def __enter__(self) -> Self:
        if not self._quiet and not self._tty:
            self._stream.write(f"{self.label} ...\n")
            self._stream.flush()
        return self

    def update(self, step: int = 1) -> None:
        """Advance by ``step`` units."""
        self.done += step
        if self._quiet or not self._tty:
            return
        now = time.perf_counter()
        if now - self._shown < 0.1 and self.done < self.total:
            return
        self._shown = now
        share = min(self.done / self.total, 1.0)
        bar = "#" * int(share * 30)
        self._stream.write(
            f"\r{self.label:<34} [{bar:<30}] {self.done:,}/{self.total:,} "
            f"{now - self._started:5.1f} s"
        )
        self._stream.flush()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._quiet:
            return
        elapsed = time.perf_counter() - self._started
        if self._tty:
            self._stream.write("\n")
        else:
            self._stream.write(f"{self.label}: done in {elapsed:.1f} s\n")
        self._stream.flush()
