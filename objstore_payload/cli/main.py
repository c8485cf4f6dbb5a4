"""The ``objstore-payload`` command line: ``demo`` and ``inspect``.

This module is the face on top of the core, adapters and lifecycle; it imports them
lazily so that ``import objstore_payload`` stays light.
"""

from __future__ import annotations

import argparse
import pathlib
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
        choices=["auto", "fsspec", "boto3", "obstore", "local"],
        help="storage engine (default: local for file://, s3fs for s3://; obstore needs "
        "the obstore extra)",
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
    import time
    from pathlib import Path

    from objstore_payload.bench import (
        SCENARIOS,
        BenchContext,
        format_report,
        run_scenario,
        write_results,
    )

    ctx = BenchContext(
        scale=args.scale,
        store=args.store,
        engine=args.engine,
        s3=_s3_options(args),
        repeats=args.repeats,
        with_s3=not args.no_s3,
        rgw_script=pathlib.Path(args.rgw_script) if args.rgw_script else _default_rgw_script(),
        quiet=args.quiet,
    )
    names = args.scenarios or list(SCENARIOS)
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        print(
            f"error: unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}",
            file=sys.stderr,
        )
        return 2
    reports = []
    started = time.perf_counter()
    for name in names:
        report = run_scenario(name, ctx)
        reports.append(report)
        print(format_report(report), flush=True)
        print(flush=True)
    for path in write_results(reports, Path(args.out)):
        print(f"wrote {path}")
    print(f"bench: {', '.join(names)} in {time.perf_counter() - started:.0f} s")
    return 0


def _plan(args: argparse.Namespace) -> int:
    import json

    from objstore_payload.bench import format_report
    from objstore_payload.bench.plan import format_plan, inputs_from_args, plan

    try:
        inputs = inputs_from_args(vars(args))
    except (TypeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = format_plan(plan(inputs))
    print(json.dumps(report.data, indent=2, default=str) if args.json else format_report(report))
    return 0


def _default_rgw_script() -> pathlib.Path | None:
    script = pathlib.Path("scripts/ceph-rgw.sh")
    return script if script.is_file() else None


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
        help="measure the data plane (batch, read, latency, response, gc, load, plan)",
        description="Run benchmark scenarios (all of them without arguments): a table on "
        "stdout, <scenario>.json, results.json and bench.png under --out. batch: the "
        "seed's inline vs by-handle table; read: window reads vs raw pread and on S3 "
        "servers; latency: a 20 ms-per-request store vs the ideal, and the prefetching "
        "loader; response: the vLLM plugin's response bytes and write latency; gc: one "
        "step's 15,000 deletes; load: 64 writers and 8 readers at once for up to 60 s; plan: "
        "the capacity model for the batch's shape.",
    )
    bench.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help="batch, read, latency, response, gc, load, plan (default: all, in that order)",
    )
    bench.add_argument("--store", help="root URL to run on instead of each scenario's default")
    bench.add_argument(
        "--scale", type=float, default=1.0, help="1.0: full size; smaller for quick runs"
    )
    bench.add_argument("--repeats", type=int, default=5, help="timed repeats (default 5)")
    bench.add_argument("--out", default="bench-results", help="folder for JSON and the PNG")
    bench.add_argument(
        "--no-s3", action="store_true", help="read: skip the embedded S3 and Ceph RGW runs"
    )
    bench.add_argument(
        "--rgw-script",
        help="read: scripts/ceph-rgw.sh of a checkout (default: ./scripts/ceph-rgw.sh if "
        "present), used when Ceph RGW is installed",
    )
    bench.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    _s3_args(bench)
    bench.set_defaults(func=_bench)

    plan = sub.add_parser(
        "plan",
        help="capacity model: requests, bytes, rates and cost per step for a run's shape",
        description="Per step: PUTs, GETs after coalescing (by the reader's own planner), "
        "bytes written and read, peak bytes stored, request rates per key prefix against "
        "S3's per-prefix limits, and cost at S3 Standard list prices. Defaults: the seed's "
        "batch (64 x 32k tokens, 30 turns, 48 x 8 routing, masks of up to 64 ids on 20%% of "
        "tokens, DP 8 x CP 4).",
    )
    for flag, kind, text in (
        ("--samples", int, "samples per step (batch size)"),
        ("--tokens-per-sample", int, "tokens per sample"),
        ("--turns", int, "requests (blobs) per sample"),
        ("--completion-share", float, "share of tokens that are completions (masked)"),
        ("--mask-ids", float, "poisson masks: mean ids per completion token"),
        ("--mask-max-ids", int, "uniform masks: most ids per completion token"),
        ("--layers", int, "MoE layers"),
        ("--top-k", int, "experts per token"),
        ("--experts", int, "experts per layer (<= 256: uint8 ids)"),
        ("--dp", int, "data-parallel degree"),
        ("--cp", int, "context-parallel degree"),
        ("--seq-len", int, "micro batch length (default: tokens per sample)"),
        ("--servers", int, "inference servers"),
        ("--steps-per-hour", float, "training steps per hour"),
        ("--max-off-policy-steps", int, "rollouts generated this many steps ahead"),
        ("--read-window-s", float, "seconds in which a step's reads happen"),
        ("--coalesce-gap", int, "range-merge gap in bytes (S3 engines: 262144)"),
    ):
        plan.add_argument(flag, type=kind, help=text)
    plan.add_argument("--mask", choices=["poisson", "uniform"], help="mask length distribution")
    plan.add_argument("--mask-width", choices=["micro_batch", "window"], help="mask width rule")
    plan.add_argument("--json", action="store_true", help="print the figures as JSON")
    plan.set_defaults(func=_plan)

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
