"""The ``objstore-payload`` command line: ``demo`` and ``inspect``.

This module is the face on top of the core, adapters and lifecycle; it imports them
lazily so that ``import objstore_payload`` stays light.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from objstore_payload.store.config import S3Options

__all__ = ["main"]


def _s3_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint-url", help="S3 endpoint (MinIO, Ceph RGW, ...)")
    parser.add_argument(
        "--path-style",
        action="store_true",
        help="path-style S3 addressing (MinIO and Ceph RGW behind a plain endpoint)",
    )
    parser.add_argument(
        "--checksum-mode",
        choices=["when_supported", "when_required"],
        help="S3 checksum mode; when_required for S3 look-alikes that reject the default",
    )
    parser.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "fsspec", "boto3", "local"],
        help="storage engine (default: local for file://, s3fs for s3://)",
    )


def _s3_options(args: argparse.Namespace) -> S3Options:
    from objstore_payload.store.config import StoreConfig

    base = StoreConfig.from_env(root="memory://unused").s3
    overrides: dict[str, Any] = {}
    if args.endpoint_url:
        overrides["endpoint_url"] = args.endpoint_url
    if args.path_style:
        overrides["addressing_style"] = "path"
    if args.checksum_mode:
        overrides["checksum_mode"] = args.checksum_mode
    import msgspec

    options: S3Options = msgspec.structs.replace(base, **overrides)
    return options


def _demo(args: argparse.Namespace) -> int:
    from objstore_payload.cli import demo

    s3 = _s3_options(args) if args.store is not None else None
    if args.through_plugin:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            print(
                "error: --through-plugin needs vLLM (scripts/setup.sh dev installs a CPU-only "
                "vLLM light)",
                file=sys.stderr,
            )
            return 2
    return demo.main(
        args.store,
        requests=args.requests,
        seed=args.seed,
        cp=args.cp,
        s3=s3,
        engine=args.engine,
        through_plugin=args.through_plugin,
    )


def _inspect(args: argparse.Namespace) -> int:
    from objstore_payload.errors import PayloadError
    from objstore_payload.store.config import StoreConfig
    from objstore_payload.store.store import Store
    from objstore_payload.verify import read_blob_info, verify_blob

    uri: str = args.uri
    root, _, _name = uri.rpartition("/")
    try:
        config = StoreConfig.from_env(root=root, engine=args.engine, s3=_s3_options(args))
        with Store(config) as store:
            if args.verify:
                info, checks = verify_blob(store, uri)
            else:
                info, checks = read_blob_info(store, uri), []
    except PayloadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{uri}: {info.size:,} bytes, format version {info.trailer.format_version}")
    header = (
        f"{'field':<24}{'offset':>12}{'bytes':>12}{'pos':>9}{'rows':>8}  "
        f"{'dtype':<8}{'shape':<10}{'values':<9}{'crc32c':>10}"
    )
    if checks:
        header += "  verify"
    print(header)
    by_region = {id(c.region): c for c in checks}
    for r in info.trailer.regions:
        line = (
            f"{r.field:<24}{r.offset:>12,}{r.nbytes:>12,}{r.pos:>9}{r.rows:>8}  {r.dtype:<8}"
            f"{list(r.shape)!s:<10}{r.value_dtype or '-':<9}{r.crc32c:>10x}"
        )
        check = by_region.get(id(r))
        if check is not None:
            line += (
                "  ok" if check.ok else f"  MISMATCH (stored bytes give {check.actual_crc32c:x})"
            )
        print(line)
    if checks and not all(c.ok for c in checks):
        print("verify: FAILED, the blob is corrupt", file=sys.stderr)
        return 1
    if checks:
        print("verify: all regions match their CRC32C")
    return 0


def _lifecycle(args: argparse.Namespace) -> int:
    import json

    from objstore_payload.lifecycle.rules import (
        LifecycleSettings,
        apply_rules,
        build_rules,
        default_settings,
        mc_ilm_commands,
    )

    defaults = default_settings()
    try:
        settings = LifecycleSettings(
            args.expire_days if args.expire_days is not None else defaults.expire_days,
            args.abort_days if args.abort_days is not None else defaults.abort_incomplete_days,
        )
        rules = build_rules(args.prefix, settings)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"Rules": rules}, indent=2))
    print("\nMinIO equivalent (MinIO aborts stale multipart uploads on its own):")
    for command in mc_ilm_commands(args.mc_alias, args.bucket, args.prefix, settings):
        print(f"  {command}")
    if args.apply:
        from botocore.exceptions import BotoCoreError, ClientError

        from objstore_payload.store.s3 import make_boto3_client

        client = make_boto3_client(_s3_options(args))
        try:
            merged = apply_rules(client, args.bucket, rules)
        except (BotoCoreError, ClientError) as exc:
            print(f"error: applying the rules to {args.bucket} failed: {exc}", file=sys.stderr)
            return 1
        finally:
            client.close()
        print(f"\napplied to s3://{args.bucket}: {len(merged)} rules in all (others kept)")
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.scenario == "gc":
        return _bench_gc(args)
    return _bench_read(args)


def _bench_gc(args: argparse.Namespace) -> int:
    from pathlib import Path

    from objstore_payload.cli.bench_gc import format_gc, run_gc, write_json
    from objstore_payload.store.config import StoreConfig
    from objstore_payload.store.store import Store

    embedded = None
    root, s3 = args.store, _s3_options(args)
    if root is None:  # S3 semantics (DeleteObjects batches) on the embedded server
        from objstore_payload.testing.embedded_s3 import EmbeddedS3

        embedded = EmbeddedS3(bucket="payloads").start()
        root, s3 = "s3://payloads/bench-gc", embedded.s3_options()
    try:
        config = StoreConfig.from_env(root=root, engine=args.engine, s3=s3)
        with Store(config) as store:
            result = run_gc(store, scale=args.scale)
    finally:
        if embedded is not None:
            embedded.stop()
    print(format_gc(result))
    print(f"results: {write_json(result, Path(args.out))}")
    return 0


def _bench_read(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from objstore_payload.cli.bench_read import format_read, run_read, write_json
    from objstore_payload.store.config import StoreConfig
    from objstore_payload.store.store import Store

    with tempfile.TemporaryDirectory(prefix="objstore-payload-bench-") as scratch:
        root = args.store or Path(scratch, "store").as_uri()
        config = StoreConfig.from_env(root=root, engine=args.engine, s3=_s3_options(args))
        with Store(config, record_requests=True) as store:
            result = run_read(store, scale=args.scale, cp_size=args.cp, repeats=args.repeats)
            if args.store:
                leftovers = store.list(store.version_prefix(0))
                if leftovers:
                    store.delete(leftovers)
    print(format_read(result))
    print(f"results: {write_json(result, Path(args.out))}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``objstore-payload``."""
    parser = argparse.ArgumentParser(
        prog="objstore-payload",
        description="Per-token rollout side arrays through object storage.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo",
        help="write synthetic requests, read them back by CP windows, check parity",
        description="Write N synthetic requests (48 x 8 uint8 routing, masks of 1-64 ids, "
        "500-8000 prompt tokens), read them back by context-parallel windows and check "
        "bitwise equality with the inline codec.",
    )
    demo.add_argument(
        "--store",
        help="root URL (s3://bucket/prefix, file:///path, memory://name); "
        "default: an embedded S3 server on 127.0.0.1",
    )
    demo.add_argument("--requests", type=int, default=16, help="number of requests (default 16)")
    demo.add_argument("--cp", type=int, default=4, help="context-parallel degree (default 4)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument(
        "--through-plugin",
        action="store_true",
        help="also send the requests through the vLLM endpoint plugin over HTTP (needs vLLM)",
    )
    _s3_args(demo)
    demo.set_defaults(func=_demo)

    inspect = sub.add_parser("inspect", help="print a blob's field table from its trailer")
    inspect.add_argument("uri", help="blob URI, e.g. s3://bucket/run/payloads/v7/<uuid>.bin")
    inspect.add_argument(
        "--verify", action="store_true", help="check every region's CRC32C; exit 1 on a mismatch"
    )
    _s3_args(inspect)
    inspect.set_defaults(func=_inspect)

    bench = sub.add_parser(
        "bench",
        help="measure the data plane (scenarios: read, gc)",
        description="read: one rank's window reads of a realistic micro batch, against a raw "
        "os.pread loop over the same byte ranges (file stores), and GETs per distinct blob. "
        "gc: collecting one step's 15,000 blobs: delete requests and how long the caller "
        "is blocked.",
    )
    bench.add_argument("scenario", choices=["read", "gc"], help="what to measure")
    bench.add_argument(
        "--store",
        help="root URL (default: read: a temporary file:// store; gc: an embedded S3 server)",
    )
    bench.add_argument("--scale", type=float, default=1.0, help="1.0: a 32k-token micro batch")
    bench.add_argument("--cp", type=int, default=4, help="context-parallel degree (default 4)")
    bench.add_argument("--repeats", type=int, default=5, help="timed repeats (default 5)")
    bench.add_argument("--out", default="bench-results", help="folder for the JSON results")
    _s3_args(bench)
    bench.set_defaults(func=_bench)

    lifecycle = sub.add_parser(
        "lifecycle",
        help="print (and apply) the bucket lifecycle rules that back up retention",
        description="Expire objects under the payload prefix after N days and abort "
        "incomplete multipart uploads bucket-wide; --apply merges the rules into the "
        "bucket's existing configuration.",
    )
    lifecycle.add_argument("--bucket", required=True, help="payload bucket")
    lifecycle.add_argument("--prefix", required=True, help="payload key prefix, e.g. run/payloads")
    lifecycle.add_argument("--expire-days", type=int, help="default: terraform/lifecycle.json")
    lifecycle.add_argument("--abort-days", type=int, help="default: terraform/lifecycle.json")
    lifecycle.add_argument("--mc-alias", default="local", help="alias for the mc command")
    lifecycle.add_argument("--apply", action="store_true", help="apply the rules with boto3")
    _s3_args(lifecycle)
    lifecycle.set_defaults(func=_lifecycle)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``objstore-payload``; returns the exit status."""
    args = build_parser().parse_args(argv)
    status: int = args.func(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
