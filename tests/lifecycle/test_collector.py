"""Retention on S3 (moto in-process and moto server): delete on consume, discards, the
per-version backstop, crash and resume, per-key errors, and never blocking the caller."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from objstore_payload import Store, StoreConfig
from objstore_payload.lifecycle import (
    PayloadCollector,
    destination,
    min_fresh_version,
    oldest_kept_version,
    version_of_key,
)
from objstore_payload.store import DeleteOutcome, Engine
from objstore_payload.store.engine import EngineWrapper, request_failed
from objstore_payload.testing.embedded_s3 import EmbeddedS3


@pytest.fixture(params=["moto-inprocess", "moto-server"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "moto-inprocess":
        with mock_aws():
            boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="payloads")
            with Store(StoreConfig(root=f"s3://payloads/{uuid.uuid4().hex}", engine="boto3")) as s:
                yield s
    else:
        server: EmbeddedS3 = request.getfixturevalue("embedded_s3")
        server.ensure_bucket()
        config = StoreConfig(root=f"s3://payloads/{uuid.uuid4().hex}", s3=server.s3_options())
        with Store(config) as s:
            yield s


def blob(store: Store, version: int) -> str:
    uri = store.new_blob_uri(store.version_prefix(version))
    store.put(uri, [b"payload"])
    return uri


def test_versions_arithmetic() -> None:
    assert min_fresh_version(11, 2) == 8
    assert oldest_kept_version(10, 2) == 8
    assert destination("s3://b/run/", 7) == "s3://b/run/v7"
    with pytest.raises(ValueError, match="older than its group"):
        destination("s3://b/run", 3, group_start_version=4)
    assert version_of_key("v12/abc.bin") == 12
    assert version_of_key("v12") is None
    assert version_of_key("v012/a.bin") is None
    assert version_of_key("x/v1/a.bin") is None


def test_delete_on_consume_over_three_steps(store: Store, tmp_path: Path) -> None:
    collector = PayloadCollector(store, max_off_policy_steps=8, ledger_path=tmp_path / "ledger")
    batches = {step: [blob(store, step - 1) for _ in range(3)] for step in (1, 2, 3)}
    in_flight = blob(store, 3)  # a rollout no batch has shipped yet
    for step, uris in batches.items():
        collector.record_batch(step, uris)
    collector.on_policy_update(1).result()
    assert sorted(store.list()) == sorted(batches[2] + batches[3] + [in_flight])
    collector.on_policy_update(3).result()
    assert store.list() == [in_flight]
    assert collector.stats.deleted_on_consume == 9
    assert collector.stats.delete_requests == 2  # one DeleteObjects per collection
    collector.close()


def test_discards_are_deleted_at_once(store: Store) -> None:
    collector = PayloadCollector(store, max_off_policy_steps=8)
    dropped, kept = [blob(store, 0) for _ in range(4)], blob(store, 0)
    collector.discard(dropped).result()
    assert store.list() == [kept]
    assert collector.stats.deleted_discarded == 4
    collector.close()


def test_backstop_keeps_exactly_the_versions_an_unread_batch_may_reference(store: Store) -> None:
    collector = PayloadCollector(store, max_off_policy_steps=2)
    collector.drain()
    uris = {k: blob(store, k) for k in range(12)}
    collector.on_policy_update(10).result()
    left = {version_of_key(store.root.relative_key(u)) for u in store.list()}
    assert left == {8, 9, 10, 11}
    assert collector.stats.deleted_by_backstop == 8
    assert uris[8] in store.list()
    collector.close()


def test_fresh_run_wipes_and_resumed_run_keeps_and_collects(store: Store, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    first = PayloadCollector(store, max_off_policy_steps=4, ledger_path=ledger)
    first.drain()
    shipped = [blob(store, 5) for _ in range(3)]
    first.record_batch(6, shipped)
    unclaimed = blob(store, 5)
    # The orchestrator crashes here: batch 6 shipped, nothing collected.
    del first

    resumed = PayloadCollector(store, max_off_policy_steps=4, ledger_path=ledger, resume=True)
    resumed.drain()
    assert sorted(store.list()) == sorted([*shipped, unclaimed])  # resume deletes nothing
    assert resumed.ledger.pending_steps == [6]
    resumed.on_policy_update(6).result()
    assert store.list() == [unclaimed]  # batch 6 collected from the replayed ledger
    resumed.on_policy_update(10).result()
    assert store.list() == []  # v5 < oldest kept v6: the backstop takes the unclaimed blob
    resumed.close()

    blob(store, 11)
    fresh = PayloadCollector(store, max_off_policy_steps=4, ledger_path=ledger)
    fresh.drain()
    assert store.list() == []
    assert fresh.ledger.pending_steps == []
    fresh.close()


def test_torn_ledger_line_is_ignored(tmp_path: Path) -> None:
    from objstore_payload.lifecycle import Ledger

    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    ledger.record(3, ["memory://x/v1/a.bin"])
    with path.open("ab") as file:
        file.write(b'{"op":"record","step":4,"ur')
    assert Ledger(path).pending_steps == [3]


class FailingDeletes(EngineWrapper):
    """Wraps a memory engine; refuses to delete some paths (a per-key DeleteObjects error
    cannot be provoked from moto, so this stands in for the store's answer)."""

    name = "failing-deletes"
    default_coalesce_gap = 0

    def __init__(
        self, inner: Engine, refuse: set[str], gate: threading.Event | None = None
    ) -> None:
        super().__init__(inner)
        self.refuse, self.gate = refuse, gate
        self.calls = 0
        self.request_fails: set[str] = set()
        """Paths whose whole request fails (as after the HTTP client's own retries)."""

    def delete(self, paths: Sequence[str]) -> DeleteOutcome:
        if self.gate is not None:
            self.gate.wait(timeout=30)
        self.calls += 1
        refused = self.refuse | self.request_fails
        outcome = self.inner.delete([p for p in paths if p not in refused])
        outcome.failed += [
            (p, OSError("AccessDenied: Access Denied")) for p in paths if p in self.refuse
        ]
        outcome.failed += [
            (p, request_failed("DeleteObjects", OSError("SlowDown")))
            for p in paths
            if p in self.request_fails
        ]
        return outcome


def memory_store(
    refuse_keys: set[str], gate: threading.Event | None = None
) -> tuple[Store, FailingDeletes]:
    import fsspec

    from objstore_payload.store.fsspec_engine import FsspecEngine

    root = f"memory://gc-{uuid.uuid4().hex}"
    engine = FailingDeletes(FsspecEngine(fsspec.filesystem("memory")), set(), gate)
    store = Store(StoreConfig(root=root), engine=engine)
    engine.refuse = {store.check_uri(f"{root}/{k}") for k in refuse_keys}
    return store, engine


def test_per_key_delete_errors_are_retried_then_reported() -> None:
    store, engine = memory_store({"v0/stuck.bin"})
    collector = PayloadCollector(store, max_off_policy_steps=2, delete_attempts=3)
    collector.drain()
    ok = blob(store, 0)
    stuck = f"{store.root.url}/v0/stuck.bin"
    store.put(stuck, [b"x"])
    engine.calls = 0
    collector.discard([ok, stuck]).result()
    assert store.list() == [stuck]
    assert engine.calls == 3  # the failed key was retried, the rest deleted once
    assert collector.stats.failed == 1
    assert "AccessDenied" in collector.stats.errors[0][1]
    collector.close()


def test_whole_request_failures_are_reported_not_resent() -> None:
    # One batch kept failing as a whole (botocore already retried it); another key was
    # refused on its own and is retried. Both end up accounted for.
    store, engine = memory_store({"v0/stuck.bin"})
    collector = PayloadCollector(store, max_off_policy_steps=2, delete_attempts=3)
    collector.drain()
    stuck, slow = f"{store.root.url}/v0/stuck.bin", f"{store.root.url}/v0/slow.bin"
    for uri in (stuck, slow):
        store.put(uri, [b"x"])
    engine.request_fails = {store.check_uri(slow)}
    engine.calls = 0
    collector.discard([stuck, slow]).result()
    assert engine.calls == 3  # the refused key three times; the failed request not resent
    assert collector.stats.failed == 2
    assert {path.rsplit("/", 1)[-1] for path, _ in collector.stats.errors} == {
        "stuck.bin",
        "slow.bin",
    }
    collector.close()


def test_collection_runs_in_the_background() -> None:
    gate = threading.Event()
    store, _ = memory_store(set(), gate)
    gate.set()
    collector = PayloadCollector(store, max_off_policy_steps=2)
    collector.drain()
    gate.clear()
    uris = [blob(store, 0) for _ in range(3)]
    collector.record_batch(1, uris)
    future = collector.on_policy_update(1)
    assert not future.done()  # returned while the deletes wait on the store
    assert len(store.list()) == 3
    gate.set()
    future.result(timeout=30)
    assert store.list() == []
    collector.close()


def simulate_run(store: Store, steps: int = 12, max_off_policy_steps: int = 2) -> dict[str, int]:
    """A run in miniature: each step dispatches rollouts at the current policy version;
    some are shipped in the next batch, some dropped, some cancelled in flight (never
    claimed). The trainer reads batch s, then policy s is applied and collected."""
    collector = PayloadCollector(store, max_off_policy_steps=max_off_policy_steps)
    written = 0
    waiting: list[str] = []
    for step in range(1, steps + 1):
        version = step - 1  # rollouts of batch `step` run on policy step - 1
        fresh = [blob(store, version) for _ in range(6)]
        written += len(fresh)
        shipped, dropped, cancelled = fresh[:4], fresh[4:5], fresh[5:]
        assert cancelled  # never claimed: only the backstop can take them
        collector.discard(dropped)
        collector.record_batch(step, waiting + shipped[:2])  # two wait for the next batch
        waiting = shipped[2:]
        collector.on_policy_update(step)
    collector.drain()
    stats = collector.stats
    collector.close()
    return {
        "written": written,
        "deleted_on_consume": stats.deleted_on_consume,
        "deleted_discarded": stats.deleted_discarded,
        "deleted_by_backstop": stats.deleted_by_backstop,
        "left": len(store.list()),
        "waiting": len(waiting),
    }


def test_a_simulated_run_keeps_only_what_may_still_be_read() -> None:
    store, _ = memory_store(set())
    result = simulate_run(store)
    assert result["written"] == 72
    # at step 12 with M = 2 the backstop keeps v10 and v11: their cancelled rollouts stay
    assert result["left"] == result["waiting"] + 2
    assert (
        result["deleted_on_consume"] + result["deleted_discarded"] + result["deleted_by_backstop"]
        == result["written"] - result["left"]
    )


def test_a_record_after_a_torn_line_survives_the_next_restart(tmp_path: Path) -> None:
    from objstore_payload.lifecycle import Ledger

    path = tmp_path / "ledger.jsonl"
    Ledger(path).record(3, ["memory://x/v1/a.bin"])
    with path.open("ab") as file:
        file.write(b'{"op":"record","step":4,"ur')  # the crash
    Ledger(path).record(5, ["memory://x/v1/b.bin"])  # the resumed run records on
    assert Ledger(path).pending_steps == [3, 5]
