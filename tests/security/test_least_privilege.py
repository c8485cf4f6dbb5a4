"""Least privilege in practice: the IAM split of ``terraform/iam.tf`` (writer, reader,
collector) as three credentials on a moto server that enforces IAM policies.

moto enforces IAM for S3 once ``INITIAL_NO_AUTH_ACTION_COUNT`` unauthenticated setup
requests are spent, so this test runs its own moto server process with that setting
(`EmbeddedS3(separate_process=True)`; the session's shared server stays open) and stops
it by PID. The policies are read from
the Terraform file itself, so the test follows any change to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from objstore_payload import (
    PayloadError,
    PayloadReader,
    PayloadWriter,
    Store,
    StoreConfig,
)
from objstore_payload.store.s3 import make_boto3_client
from objstore_payload.testing.embedded_s3 import EmbeddedS3
from objstore_payload.testing.loopback import loopback_s3_options
from tests.faults.test_fault_matrix import arrays, read_back

hcl2 = pytest.importorskip("hcl2")

TERRAFORM = Path(__file__).resolve().parents[2] / "terraform"
BUCKET, PREFIX = "payloads", "run/payloads"
ROLES = ("writer", "reader", "collector")
SETUP_REQUESTS = 1 + 3 * len(ROLES)
"""create_bucket, then per role: create_user, put_user_policy, create_access_key."""


def terraform_policies() -> dict[str, list[dict[str, Any]]]:
    """IAM statements per role from terraform/iam.tf, with the bucket and prefix filled in."""
    with (TERRAFORM / "iam.tf").open() as file:
        parsed = hcl2.load(file)
    arn = f"arn:aws:s3:::{BUCKET}"
    out: dict[str, list[dict[str, Any]]] = {}
    for block in parsed["data"]:
        for kind, documents in block.items():
            if kind.strip('"') != "aws_iam_policy_document":
                continue
            for name, document in documents.items():
                statements = []
                for statement in document["statement"]:
                    # python-hcl2 may keep the quotes of string literals.
                    resources = [
                        r.strip('"')
                        .replace("${aws_s3_bucket.payloads.arn}", arn)
                        .replace("${local.prefix}", PREFIX + "/")
                        for r in statement["resources"]
                    ]
                    assert not any("${" in r for r in resources), resources
                    statements.append(
                        {
                            "Effect": "Allow",
                            "Action": [a.strip('"') for a in statement["actions"]],
                            "Resource": resources,
                        }
                    )
                out[name.strip('"')] = statements
    assert set(out) == set(ROLES)
    return out


@pytest.fixture(scope="module")
def enforcing_moto() -> Iterator[tuple[str, dict[str, tuple[str, str]]]]:
    import boto3

    # The server counts the bucket it creates on start as one of the setup requests.
    env = {"INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}
    with EmbeddedS3(BUCKET, separate_process=True, env=env) as server:
        iam = boto3.client(
            "iam",
            endpoint_url=server.endpoint_url,
            aws_access_key_id="AKIASETUP",
            aws_secret_access_key="setup",
            region_name="us-east-1",
        )
        credentials = {}
        for role, statements in terraform_policies().items():
            iam.create_user(UserName=role)
            iam.put_user_policy(
                UserName=role,
                PolicyName=f"payload-{role}",
                PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
            )
            key = iam.create_access_key(UserName=role)["AccessKey"]
            credentials[role] = (key["AccessKeyId"], key["SecretAccessKey"])
        iam.close()
        yield server.endpoint_url, credentials


def store_as(role: str, enforcing: tuple[str, dict[str, tuple[str, str]]], engine: str) -> Store:
    endpoint, credentials = enforcing
    options = loopback_s3_options(endpoint, *credentials[role])
    return Store(StoreConfig(root=f"s3://{BUCKET}/{PREFIX}", engine=engine, s3=options))


@pytest.mark.parametrize("engine", ["fsspec", "boto3", "obstore"])
def test_each_role_can_do_its_part_and_nothing_else(
    enforcing_moto: tuple[str, dict[str, tuple[str, str]]], engine: str
) -> None:
    with (
        store_as("writer", enforcing_moto, engine) as writer,
        store_as("reader", enforcing_moto, engine) as reader,
        store_as("collector", enforcing_moto, engine) as collector,
    ):
        segments = PayloadWriter(writer).write(writer.version_prefix(1), arrays())
        uri = segments[0].uri
        routing, _ = read_back(reader, segments)  # the reader reads
        assert routing is not None

        # A writer cannot list; a reader cannot list, delete or write.
        for store in (writer, reader):
            with pytest.raises(PayloadError, match=re.escape(PREFIX)):
                store.list()
        report = reader.delete([uri])
        assert report.deleted == 0
        assert len(report.failed) == 1
        with pytest.raises(PayloadError):
            PayloadWriter(reader).write(reader.version_prefix(1), arrays())
        report = writer.delete([uri])
        assert report.failed
        assert collector.list() == [uri]  # still there

        # The collector lists and deletes, but cannot read.
        with pytest.raises(PayloadError):
            PayloadReader(collector).read_field(segments, "routed_experts", 0, 10)
        # moto authorizes a DeleteObjects request per key against the bucket's ARN and
        # refuses each key, where AWS checks s3:DeleteObject on each key's ARN; the
        # collector's permission is shown with a single-key DELETE instead. The refusal
        # comes back per key, reported, not raised.
        report = collector.delete([uri])
        assert report.failed or collector.list() == []
        if report.failed:
            client = make_boto3_client(collector.config.s3)
            client.delete_object(Bucket=BUCKET, Key=uri.removeprefix(f"s3://{BUCKET}/"))
            client.close()
        assert collector.list() == []
