"""Crash consistency: a writer killed in the middle of a large upload leaves no object
visible under the root and returned no segment; an orchestrator killed after shipping a
batch and restarted with ``resume`` deletes nothing an unread batch needs and, in the
end, collects everything else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from objstore_payload import PayloadWriter, Store, StoreConfig
from objstore_payload.lifecycle import PayloadCollector
from objstore_payload.testing.embedded_s3 import EmbeddedS3
from objstore_payload.testing.fault_proxy import Fault, FaultProxy
from tests.faults.test_fault_matrix import arrays

BIG = 96 << 20
"""Bytes of the upload that gets killed."""

WRITER = textwrap.dedent(
    """
    import json, sys
    from objstore_payload import Store, StoreConfig
    config = StoreConfig.from_mapping(json.loads(sys.argv[1]))
    store = Store(config)
    uri = store.new_blob_uri(store.version_prefix(1))
    print("writing", uri, flush=True)
    store.put(uri, [bytes({big})])
    print("segment", uri, flush=True)
    """
).format(big=BIG)


def run_writer(config: StoreConfig) -> subprocess.Popen[str]:
    import msgspec

    return subprocess.Popen(
        [sys.executable, "-c", WRITER, msgspec.json.encode(config).decode()],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )


def kill(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGKILL)
    out, _ = process.communicate(timeout=30)
    return out


def test_a_local_writer_killed_mid_write_leaves_nothing_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "p"
    process = run_writer(StoreConfig(root=root.as_uri()))
    deadline = time.monotonic() + 60
    # Wait until the temporary file exists and holds part of the blob, then kill.
    while time.monotonic() < deadline:
        temps = list((root / "v1").glob(".*")) if (root / "v1").exists() else []
        if temps and temps[0].stat().st_size > 0:
            break
        time.sleep(0.001)
    out = kill(process)
    assert "segment" not in out  # no segment was returned
    with Store(StoreConfig(root=root.as_uri())) as store:
        assert store.list() == []  # the partial temporary file is not an object
    assert all(p.name.startswith(".") for p in (root / "v1").iterdir())


def test_an_s3_writer_killed_mid_upload_leaves_nothing_visible(
    embedded_s3: EmbeddedS3,
) -> None:
    import msgspec

    embedded_s3.ensure_bucket()
    with FaultProxy(embedded_s3.endpoint_url) as proxy:
        options = msgspec.structs.replace(embedded_s3.s3_options(), endpoint_url=proxy.endpoint_url)
        config = StoreConfig(root=f"s3://{embedded_s3.bucket}/crash", s3=options, engine="boto3")
        proxy.inject(Fault("put", "stall", delay_s=30))
        process = run_writer(config)
        deadline = time.monotonic() + 60
        while not proxy.hits and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.hits, "the upload never reached the proxy"
        out = kill(process)
        assert "segment" not in out
    direct = StoreConfig(root=f"s3://{embedded_s3.bucket}/crash", s3=embedded_s3.s3_options())
    with Store(direct) as store:
        assert store.list() == []


def test_an_orchestrator_restarted_with_resume_keeps_what_unread_batches_need(
    tmp_path: Path,
) -> None:
    root, ledger = (tmp_path / "p").as_uri(), tmp_path / "ledger.jsonl"
    with Store(StoreConfig(root=root)) as store:
        writer = PayloadWriter(store)

        def blob(version: int) -> str:
            written = writer.write_blob(store.version_prefix(version), arrays())
            assert written is not None
            return written.uri

        first = PayloadCollector(store, max_off_policy_steps=2, ledger_path=ledger)
        shipped = {step: [blob(step), blob(step)] for step in (1, 2, 3)}
        for step, uris in shipped.items():
            first.record_batch(step, uris)
        first.on_policy_update(1).result()  # batch 1 read and collected
        in_flight = blob(4)  # written, not shipped yet
        # The orchestrator dies here: no close, no further updates.
        del first

        second = PayloadCollector(store, max_off_policy_steps=2, ledger_path=ledger, resume=True)
        left = set(store.list())
        assert set(shipped[2]) | set(shipped[3]) | {in_flight} <= left  # nothing unread lost
        assert not set(shipped[1]) & left
        second.on_policy_update(3).result()
        second.record_batch(5, [in_flight])
        second.on_policy_update(5).result()
        assert store.list() == []  # everything collected in the end
        second.close()
    assert json.loads(ledger.read_text().splitlines()[-1])  # the ledger is still readable
