"""The obstore engine's own rules: how `S3Options` map onto an ``S3Store``, where the
engine may run, and what a missing extra says. Its I/O runs in the conformance suite."""

from __future__ import annotations

import os
import sys
import uuid

import msgspec
import pytest

from objstore_payload import Store, StoreConfig, StoreConfigError
from objstore_payload.store import S3Options
from objstore_payload.store.engine import RequestFailed
from objstore_payload.testing.embedded_s3 import EmbeddedS3

obstore_engine = pytest.importorskip("objstore_payload.store.obstore_engine")


def test_options_map_onto_the_store() -> None:
    options = S3Options(
        endpoint_url="http://127.0.0.1:9000",
        addressing_style="path",
        region="eu-west-1",
        access_key_id="key",
        secret_access_key="secret",
        session_token="token",
        connect_timeout_s=2,
        read_timeout_s=7,
        max_attempts=4,
    )
    store = obstore_engine.make_obstore_store(options, "bkt")
    assert store.config["bucket"] == "bkt"
    assert store.config["endpoint"] == "http://127.0.0.1:9000"
    assert store.config["region"] == "eu-west-1"
    assert store.config["virtual_hosted_style_request"] == "false"
    assert (store.config["access_key_id"], store.config["session_token"]) == ("key", "token")
    assert store.client_options is not None
    assert store.client_options["allow_http"] == "true"
    assert (store.client_options["connect_timeout"], store.client_options["read_timeout"]) == (
        "2s",
        "7s",
    )
    # One retry layer: max_attempts counts the first request, max_retries does not.
    assert store.retry_config is not None
    assert store.retry_config["max_retries"] == 3


def test_virtual_addressing_puts_the_bucket_in_the_host_and_anonymous_skips_signing() -> None:
    options = S3Options(
        endpoint_url="https://s3.example.com", addressing_style="virtual", anonymous=True
    )
    store = obstore_engine.make_obstore_store(options, "bkt")
    assert store.config["endpoint"] == "https://bkt.s3.example.com"
    assert store.config["virtual_hosted_style_request"] == "true"
    assert store.config["skip_signature"] == "true"
    assert store.client_options is not None
    assert store.client_options["allow_http"] == "false"


def test_a_profile_that_does_not_exist_is_a_config_error() -> None:
    options = S3Options(profile=f"no-such-profile-{uuid.uuid4().hex}")
    with pytest.raises(StoreConfigError, match="AWS profile"):
        obstore_engine.ObstoreEngine(options)


def test_obstore_serves_s3_roots_only() -> None:
    with (
        Store(StoreConfig(root="memory://x", engine="obstore")) as store,
        pytest.raises(StoreConfigError, match="s3:// roots only"),
    ):
        store.list()


def test_missing_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "obstore", None)  # import obstore -> ImportError
    with (
        Store(StoreConfig(root="s3://payloads/x", engine="obstore")) as store,
        pytest.raises(StoreConfigError, match=r"pip install 'objstore-payload\[obstore\]'"),
    ):
        store.list()


def test_a_forked_child_refuses_instead_of_hanging(monkeypatch: pytest.MonkeyPatch) -> None:
    # obstore's tokio runtime does not survive fork(): a child's first request hangs.
    # Pretend the runtime was started by another process (the parent of a fork).
    monkeypatch.setattr(obstore_engine, "_RUNTIME_PID", os.getpid() + 1)
    with (
        Store(StoreConfig(root="s3://payloads/x", engine="obstore")) as store,
        pytest.raises(StoreConfigError, match="fork"),
    ):
        store.list()


@pytest.mark.s3
def test_credentials_come_from_the_aws_chain(
    embedded_s3: EmbeddedS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No keys in the options: botocore's chain (here the environment) supplies them.
    keyed = embedded_s3.s3_options()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", keyed.access_key_id or "")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keyed.secret_access_key or "")
    options = msgspec.structs.replace(keyed, access_key_id=None, secret_access_key=None)
    embedded_s3.ensure_bucket()
    config = StoreConfig(
        root=f"s3://{embedded_s3.bucket}/{uuid.uuid4().hex}", engine="obstore", s3=options
    )
    with Store(config) as store:
        assert store.engine._credentials is not None  # type: ignore[attr-defined]
        uri = store.new_blob_uri(store.root.url)
        store.put(uri, [b"payload"])
        assert bytes(store.read(uri, 3, 7)) == b"load"
        assert store.delete([uri]).deleted == 1


@pytest.mark.s3
def test_a_key_refused_inside_a_delete_batch_is_reported_alone(
    embedded_s3: EmbeddedS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    from obstore.exceptions import GenericError

    embedded_s3.ensure_bucket()
    config = StoreConfig(
        root=f"s3://{embedded_s3.bucket}/{uuid.uuid4().hex}",
        engine="obstore",
        s3=embedded_s3.s3_options(),
    )
    with Store(config) as store:
        uris = [store.new_blob_uri(store.root.url) for _ in range(3)]
        for uri in uris:
            store.put(uri, [b"payload"])
        refused = store.check_uri(uris[1]).partition("/")[2]
        real_delete_async = obstore_engine.obstore.delete_async

        def batch_delete(store_: object, keys: list[str]) -> None:
            # What object_store raises for a per-key <Error> in a 200 DeleteObjects answer.
            raise GenericError(
                f"Generic S3 error: DeleteObjects request failed for key {refused}: "
                "Access Denied (code: AccessDenied)"
            )

        async def delete_async(store_: object, key: str) -> None:
            if key == refused:
                raise GenericError("Generic S3 error: Access Denied")
            await real_delete_async(store_, key)  # type: ignore[arg-type]

        monkeypatch.setattr(obstore_engine.obstore, "delete", batch_delete)
        monkeypatch.setattr(obstore_engine.obstore, "delete_async", delete_async)
        report = store.delete(uris)
        assert [path for path, _ in report.failed] == [store.check_uri(uris[1])]
        assert isinstance(report.failed[0][1], OSError)
        assert (report.deleted, report.requests) == (2, 1 + 3)
        monkeypatch.undo()
        assert store.list() == [uris[1]]
        assert store.delete([uris[1]]).deleted == 1


def test_a_failed_delete_request_is_reported_as_such() -> None:
    # Nothing listens on port 9 of 127.0.0.1: the whole DeleteObjects request fails, which
    # callers report rather than send again (object_store already retried what it could).
    options = S3Options(
        endpoint_url="http://127.0.0.1:9",
        addressing_style="path",
        access_key_id="x",
        secret_access_key="y",
        region="us-east-1",
        max_attempts=1,
        connect_timeout_s=1,
    )
    with Store(StoreConfig(root="s3://payloads/x", engine="obstore", s3=options)) as store:
        report = store.delete(["s3://payloads/x/a.bin", "s3://payloads/x/b.bin"])
    assert [path for path, _ in report.failed] == ["payloads/x/a.bin", "payloads/x/b.bin"]
    assert all(isinstance(error, RequestFailed) for _, error in report.failed)
    assert report.requests == 1
