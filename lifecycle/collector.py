"""Retention: delete on consume, discard dropped rollouts, and a per-version backstop.

The orchestrator calls, in order of a run:

- `PayloadCollector.record_batch(step, uris)` when batch ``step`` ships (or prunes) the
  blobs of its traces;
- `PayloadCollector.discard(uris)` when it drops rollouts (stale groups, untrainable
  branches, pruned samples);
- `PayloadCollector.on_policy_update(step)` after inference applies policy ``step``:
  every recorded batch <= ``step`` has been read by then, so its blobs go; then the
  backstop removes every ``v<k>/`` with ``k < oldest_kept_version(step, max_off_policy_steps)``
  (blobs no batch claimed: cancelled or failed rollouts, files from before a resume).

Deletion never blocks the caller: the work runs on one background thread, in order, and
the calls return a `Future`. Deletes are batched (S3 DeleteObjects: 1,000 keys a request);
per-key failures are retried, then reported (`errors`, and the log), never dropped.
A fresh run wipes the root before the constructor returns (start-up is the one place that
waits on deletes); a resumed run keeps it and replays the ledger.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from objstore_payload.errors import UriNotAllowedError
from objstore_payload.lifecycle.ledger import Ledger
from objstore_payload.lifecycle.versions import oldest_kept_version, version_of_key
from objstore_payload.store.engine import RequestFailed
from objstore_payload.store.store import Store

__all__ = ["CollectorStats", "PayloadCollector"]

log = logging.getLogger(__name__)


@dataclass
class CollectorStats:
    """What the collector deleted, by reason."""

    deleted_on_consume: int = 0
    deleted_by_backstop: int = 0
    deleted_discarded: int = 0
    deleted_by_wipe: int = 0
    delete_requests: int = 0
    failed: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)


class PayloadCollector:
    """Deletes payload blobs once no unread batch can reference them."""

    def __init__(
        self,
        store: Store,
        *,
        max_off_policy_steps: int,
        ledger_path: str | os.PathLike[str] | None = None,
        resume: bool = False,
        delete_attempts: int = 3,
    ) -> None:
        if max_off_policy_steps < 0 or delete_attempts < 1:
            raise ValueError("max_off_policy_steps must be >= 0 and delete_attempts >= 1")
        self.store = store
        self.max_off_policy_steps = max_off_policy_steps
        self.ledger = Ledger(ledger_path)
        self.stats = CollectorStats()
        self._attempts = delete_attempts
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="payload-gc")
        self._last: Future[None] | None = None
        self._lock = threading.Lock()
        if not resume:
            # A fresh run owns the root: nothing there can be read again. The wipe runs
            # before the constructor returns, so it can never race the run's own writes.
            self.ledger.reset()
            self._wipe()

    # -- what the orchestrator calls -------------------------------------------------------
    def record_batch(self, step: int, uris: Iterable[str]) -> None:
        """Batch ``step`` ships (or prunes) these blobs; durable on the ledger on return."""
        listed = list(uris)
        for uri in listed:
            self.store.check_uri(uri)  # a hostile URI never reaches the ledger
        self.ledger.record(step, listed)

    def discard(self, uris: Iterable[str]) -> Future[None]:
        """Delete the blobs of dropped rollouts, in the background."""
        listed = list(uris)
        for uri in listed:
            self.store.check_uri(uri)
        return self._submit(lambda: self._delete(listed, "deleted_discarded"))

    def on_policy_update(self, step: int) -> Future[None]:
        """Inference applied policy ``step``: collect in the background, return at once."""
        return self._submit(lambda: self._collect(step))

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every queued deletion has run."""
        with self._lock:
            last = self._last
        if last is not None:
            last.result(timeout=timeout)

    def close(self) -> None:
        """Finish queued deletions and stop the background thread."""
        self._executor.shutdown(wait=True)

    # -- background work ---------------------------------------------------------------------
    def _submit(self, work: object) -> Future[None]:
        def run() -> None:
            try:
                work()  # type: ignore[operator]
            except Exception:
                log.exception("payload collection failed; the next collection retries")
                raise

        with self._lock:
            future = self._executor.submit(run)
            self._last = future
        return future

    def _collect(self, step: int) -> None:
        pending = self.ledger.pending_through(step)
        uris = [uri for batch in pending.values() for uri in batch]
        if uris:
            self._delete(uris, "deleted_on_consume")
        self.ledger.mark_collected(step)
        bound = oldest_kept_version(step, self.max_off_policy_steps)
        if bound > 0:
            stale = [
                uri
                for uri in self._ours()
                if (k := version_of_key(self.store.root.relative_key(uri))) is not None
                and k < bound
            ]
            if stale:
                self._delete(stale, "deleted_by_backstop")

    def _ours(self) -> list[str]:
        """Objects under the root with keys this package could have written."""
        found = []
        for uri in self.store.list():
            try:
                self.store.check_uri(uri)
            except UriNotAllowedError:
                log.warning("leaving %r alone: not a key this package writes", uri)
                continue
            found.append(uri)
        return found

    def _wipe(self) -> None:
        uris = self._ours()
        if uris:
            self._delete(uris, "deleted_by_wipe")

    def _delete(self, uris: Sequence[str], reason: str) -> None:
        todo = list(dict.fromkeys(uris))
        given_up: list[tuple[str, BaseException]] = []
        for attempt in range(1, self._attempts + 1):
            report = self.store.delete(todo)
            self.stats.delete_requests += report.requests
            setattr(self.stats, reason, getattr(self.stats, reason) + report.deleted)
            # Keys the server refused one by one are tried again; a request that failed
            # as a whole was already retried by the HTTP client (one retry layer), so its
            # keys are reported now rather than sent again.
            again = set()
            for path, error in report.failed:
                if isinstance(error, RequestFailed) or attempt == self._attempts:
                    given_up.append((path, error))
                else:
                    again.add(path)
            todo = [u for u in todo if self.store.check_uri(u) in again]
            if not todo:
                break
        for path, error in given_up:
            log.warning("could not delete payload %s: %s", path, error)
            self.stats.errors.append((path, repr(error)))
        self.stats.failed += len(given_up)
