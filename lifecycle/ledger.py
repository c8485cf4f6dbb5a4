"""The ledger: which blobs each shipped batch points at, until they are collected.

An append-only JSON-lines file next to the run's other state. Each line is durable
(fsync) before the call returns, so a batch is on record before anything can read it, and
an orchestrator that restarts replays the file to find batches shipped but not yet
collected. A torn last line (a crash mid-write) is ignored.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path

__all__ = ["Ledger"]

log = logging.getLogger(__name__)


class Ledger:
    """Batches recorded by step; ``path=None`` keeps them in memory only."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._pending: dict[int, list[str]] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():
            self._replay(self.path)
            self._cut_torn_tail(self.path)

    def _replay(self, path: Path) -> None:
        with path.open("rb") as file:
            lines = file.read().splitlines()
        for number, line in enumerate(lines, start=1):
            try:
                entry = json.loads(line)
                if entry["op"] == "record":
                    self._pending.setdefault(int(entry["step"]), []).extend(entry["uris"])
                elif entry["op"] == "collected":
                    for step in [s for s in self._pending if s <= int(entry["through"])]:
                        del self._pending[step]
                elif entry["op"] == "reset":
                    self._pending.clear()
            except (ValueError, KeyError, TypeError):
                if number == len(lines):
                    log.warning("ledger %s: ignoring a torn last line", path)
                    continue
                raise

    @staticmethod
    def _cut_torn_tail(path: Path) -> None:
        """Drop a partial last line, so the next record starts on a line of its own."""
        with path.open("r+b") as file:
            data = file.read()
            if data and not data.endswith(b"\n"):
                file.truncate(data.rfind(b"\n") + 1)
                file.flush()
                os.fsync(file.fileno())

    def _append(self, entry: dict[str, object]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        with self.path.open("ab") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())

    def record(self, step: int, uris: Iterable[str]) -> None:
        """Put the blobs of batch ``step`` on record (durable when this returns)."""
        listed = list(uris)
        with self._lock:
            self._append({"op": "record", "step": step, "uris": listed})
            self._pending.setdefault(step, []).extend(listed)

    def pending_through(self, step: int) -> dict[int, list[str]]:
        """Recorded batches with step <= ``step`` that are not collected yet."""
        with self._lock:
            return {s: list(u) for s, u in self._pending.items() if s <= step}

    def mark_collected(self, step: int) -> None:
        """Every batch <= ``step`` has been collected."""
        with self._lock:
            self._append({"op": "collected", "through": step})
            for s in [s for s in self._pending if s <= step]:
                del self._pending[s]

    def reset(self) -> None:
        """Forget everything (a fresh run)."""
        with self._lock:
            self._append({"op": "reset"})
            self._pending.clear()

    @property
    def pending_steps(self) -> list[int]:
        """Steps recorded and not collected."""
        with self._lock:
            return sorted(self._pending)
