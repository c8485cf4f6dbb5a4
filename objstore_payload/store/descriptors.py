"""A small, thread-safe LRU of open file descriptors, keyed by path.

A descriptor handed out by `acquire` stays valid until the matching `release`, even if it
is evicted or dropped meanwhile (it is closed then, after its last user): one thread's
eviction never closes a descriptor another thread is reading from.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable

__all__ = ["DescriptorCache"]


class DescriptorCache:
    """Up to ``capacity`` descriptors opened by ``opener(path)``, least recently used
    closed first (0: none kept; each closes after its last use)."""

    def __init__(self, capacity: int, opener: Callable[[str], int]) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self._capacity = capacity
        self._opener = opener
        self._fds: dict[str, int] = {}  # path -> descriptor, least recently used first
        self._users: dict[int, int] = {}  # descriptor -> acquisitions not yet released
        self._lock = threading.Lock()

    def acquire(self, path: str) -> int:
        """A descriptor of ``path``; give it back with `release`."""
        with self._lock:
            fd = self._fds.pop(path, None)
            if fd is not None:
                self._fds[path] = fd  # most recently used
                self._users[fd] = self._users.get(fd, 0) + 1
                return fd
        fd = self._opener(path)  # outside the lock: an open may wait on a network mount
        with self._lock:
            if self._capacity and path not in self._fds:
                self._fds[path] = fd
            self._users[fd] = self._users.get(fd, 0) + 1
            while len(self._fds) > self._capacity:
                oldest = next(iter(self._fds))
                self._close_idle_locked(self._fds.pop(oldest))
        return fd

    def release(self, path: str, fd: int) -> None:
        """Done with ``fd``; it stays cached unless it was evicted or never cached."""
        with self._lock:
            users = self._users[fd] - 1
            if users:
                self._users[fd] = users
                return
            del self._users[fd]
            if self._fds.get(path) != fd:
                os.close(fd)

    def drop(self, paths: Iterable[str] | None = None) -> None:
        """Forget the descriptors of ``paths`` (or all); idle ones close now, the others
        after their last `release`."""
        with self._lock:
            for path in list(self._fds) if paths is None else paths:
                fd = self._fds.pop(path, None)
                if fd is not None:
                    self._close_idle_locked(fd)

    def after_fork(self) -> None:
        """In a forked child: close the parent's descriptors copied by the fork (the
        child has one thread, and the copied lock may be held: it is replaced)."""
        self._lock = threading.Lock()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._users.clear()

    def __len__(self) -> int:
        return len(self._fds)

    def _close_idle_locked(self, fd: int) -> None:
        if fd not in self._users:
            os.close(fd)
