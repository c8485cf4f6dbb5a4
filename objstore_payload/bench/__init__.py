"""``objstore-payload bench``: measure the data plane against its baselines.

Scenarios (each a module with ``run(ctx) -> Report``): ``batch`` (the seed's inline versus
by-handle table), ``read`` (window reads against raw pread, and on S3 servers), ``latency``
(a 20 ms-per-request store against the ideal, and the prefetching loader), ``response``
(the vLLM plugin's response bytes and write latency), ``gc`` (one step's deletes),
``load`` (64 writers and 8 readers at once: nothing lost, memory and descriptors bounded)
and ``plan`` (the capacity model; no measurement).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from objstore_payload.bench.context import BenchContext
from objstore_payload.bench.report import Report, format_report, write_results

__all__ = ["SCENARIOS", "BenchContext", "Report", "format_report", "run_scenario", "write_results"]

SCENARIOS = ("batch", "read", "latency", "response", "gc", "load", "plan")
"""In the order a full run takes them."""


def run_scenario(name: str, ctx: BenchContext) -> Report:
    """Run one scenario by name."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    module = importlib.import_module(f"objstore_payload.bench.{name}")
    run: Callable[[BenchContext], Report] = module.run
    return run(ctx)
