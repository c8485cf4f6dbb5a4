"""Bucket lifecycle rules: the backstop for whatever a crashed run leaves behind.

Two rules: expire objects under the payload prefix after ``expire_days`` days, and abort
incomplete multipart uploads bucket-wide after ``abort_incomplete_days``. S3 lifecycle is
day-granular and runs about once a day, so it only catches leaks; the collector does the
real work. ``PutBucketLifecycleConfiguration`` replaces the whole rule set, so `apply_rules`
reads the bucket's rules first and merges ours in by ID, keeping every other rule.

The defaults live in ``terraform/lifecycle.json``, read by both this module and the
Terraform module, so the two cannot drift.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "LifecycleSettings",
    "apply_rules",
    "build_rules",
    "default_settings",
    "mc_ilm_commands",
    "merge_rules",
]

RULE_ID_PREFIX: Final = "objstore-payload-"
_DEFAULTS_FILE: Final = "lifecycle.json"


@dataclass(frozen=True)
class LifecycleSettings:
    """The values of the two rules."""

    expire_days: int
    abort_incomplete_days: int

    def __post_init__(self) -> None:
        if self.expire_days < 1 or self.abort_incomplete_days < 1:
            raise ValueError("lifecycle days are whole days, at least 1")


BUILTIN_DEFAULTS: Final = LifecycleSettings(expire_days=2, abort_incomplete_days=1)
"""Used where ``terraform/lifecycle.json`` is not shipped (an installed wheel); a test
checks it equals the file."""


def _defaults_path() -> Path:
    here = Path(__file__).resolve()
    for base in (here.parent.parent, here.parent.parent.parent):
        candidate = base / "terraform" / _DEFAULTS_FILE
        if candidate.is_file():
            return candidate
    return here.parent / _DEFAULTS_FILE


def default_settings() -> LifecycleSettings:
    """The shared defaults (``terraform/lifecycle.json``; built-in if it is not shipped)."""
    path = _defaults_path()
    if path.is_file():
        data = json.loads(path.read_text())
        return LifecycleSettings(int(data["expire_days"]), int(data["abort_incomplete_days"]))
    return BUILTIN_DEFAULTS


def _prefix(prefix: str) -> str:
    cleaned = prefix.strip("/")
    if not cleaned:
        raise ValueError("the payload prefix must not be the whole bucket")
    return cleaned + "/"


def build_rules(prefix: str, settings: LifecycleSettings | None = None) -> list[dict[str, Any]]:
    """The two rules for payloads under ``prefix`` (a key prefix in the bucket)."""
    values = settings or default_settings()
    key_prefix = _prefix(prefix)
    return [
        {
            # The hash keeps "a-b/" and "a/b/" apart; terraform/main.tf builds the same ID.
            "ID": f"{RULE_ID_PREFIX}expire-{key_prefix.rstrip('/').replace('/', '-')}-"
            f"{hashlib.sha1(key_prefix.encode()).hexdigest()[:8]}",
            "Filter": {"Prefix": key_prefix},
            "Status": "Enabled",
            "Expiration": {"Days": values.expire_days},
        },
        {
            # Bucket-wide (an empty filter): a prefix-scoped abort rule leaves other
            # uploads' parts billed forever, and checkov's CKV_AWS_300 wants it so.
            "ID": f"{RULE_ID_PREFIX}abort-incomplete-multipart",
            "Filter": {},
            "Status": "Enabled",
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": values.abort_incomplete_days},
        },
    ]


def merge_rules(existing: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``existing`` with ``ours`` replacing rules of the same ID and appended otherwise."""
    by_id = {rule["ID"]: rule for rule in ours}
    merged = [by_id.pop(rule.get("ID"), rule) for rule in existing]
    return merged + list(by_id.values())


def apply_rules(client: Any, bucket: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge ``rules`` into the bucket's lifecycle configuration (boto3 client); returns
    the full rule set written."""
    from botocore.exceptions import ClientError

    try:
        existing = client.get_bucket_lifecycle_configuration(Bucket=bucket).get("Rules", [])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NoSuchLifecycleConfiguration":
            raise
        existing = []
    merged = merge_rules(existing, rules)
    client.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": merged}
    )
    return merged


def mc_ilm_commands(
    alias: str, bucket: str, prefix: str, settings: LifecycleSettings | None = None
) -> list[str]:
    """The MinIO client commands for the same expiry. MinIO aborts stale multipart
    uploads itself (``api stale_uploads_expiry``, 24 h by default), so there is no rule
    for them."""
    values = settings or default_settings()
    target = shlex.quote(f"{alias}/{bucket}")
    return [
        f"mc ilm rule add --expire-days {values.expire_days} "
        f"--prefix {shlex.quote(_prefix(prefix))} {target}"
    ]
