"""Policy versions and the prefixes payloads are written under.

Every train rollout writes under ``<root>/v<k>``, k the policy version it was dispatched
at. The orchestrator's staleness rule decides which versions an unread batch may still
reference, and so which prefixes the backstop may remove.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["destination", "min_fresh_version", "oldest_kept_version", "version_of_key"]

_VERSION_PART: Final = re.compile(r"\Av(0|[1-9][0-9]{0,17})\Z")


def min_fresh_version(step: int, max_off_policy_steps: int) -> int:
    """The oldest policy version a rollout shipped in batch ``step`` may have started at:
    ``step - 1 - max_off_policy_steps`` (the orchestrator drops older groups as stale)."""
    if step < 0 or max_off_policy_steps < 0:
        raise ValueError("step and max_off_policy_steps must be non-negative")
    return step - 1 - max_off_policy_steps


def oldest_kept_version(step: int, max_off_policy_steps: int) -> int:
    """After inference applies policy ``step``, the backstop keeps ``v<k>`` for k at or
    above this, ``min_fresh_version(step + 1, max_off_policy_steps)``, and removes the rest.

    Why nothing an unread batch references is removed: the trainer reads batch s before
    it publishes policy s, so when policy ``step`` is applied every batch <= ``step`` has
    been read. An unread batch b >= step + 1 ships only rollouts whose group started at
    ``min_fresh_version(b) >= min_fresh_version(step + 1)``, and a rollout writes under the
    version it was dispatched at, which is never older than its group's start.
    """
    return min_fresh_version(step + 1, max_off_policy_steps)


def destination(
    root_url: str, dispatch_version: int, group_start_version: int | None = None
) -> str:
    """``<root>/v<k>`` for a rollout dispatched at policy ``dispatch_version``.

    ``group_start_version`` (when known) is checked: a rollout is never dispatched before
    its group started, and the backstop's guarantee relies on it.
    """
    if type(dispatch_version) is not int or dispatch_version < 0:
        raise ValueError(f"policy version must be a non-negative int, got {dispatch_version!r}")
    if group_start_version is not None and dispatch_version < group_start_version:
        raise ValueError(
            f"dispatch version {dispatch_version} is older than its group's start "
            f"{group_start_version}"
        )
    return f"{root_url.rstrip('/')}/v{dispatch_version}"


def version_of_key(key: str) -> int | None:
    """k for a key ``v<k>/...`` under the root, None for anything else."""
    first, sep, _rest = key.partition("/")
    match = _VERSION_PART.match(first)
    return int(match.group(1)) if match and sep else None
