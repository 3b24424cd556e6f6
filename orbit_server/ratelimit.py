"""The server's rate limits (docs/security.md): token buckets by key, and the one
failed-login budget every door spends from. Pure: time arrives as ``now_s`` (the adapters
pass ``time.monotonic()``), so tests drive it by hand.

A bucket holds at most ``burst`` tokens and refills at ``rate`` per second; ``take`` spends
``n`` or answers how many seconds until it could. At most ``max_keys`` buckets are kept:
past it the fullest (least recently limited) are forgotten first, so a flood of distinct
keys costs bounded memory and forgets only keys that were not being limited.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at_s: float


class TokenBuckets:
    """A token bucket per key (a credential, a peer address)."""

    def __init__(self, rate: float, burst: float, max_keys: int = 10_000) -> None:
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: dict[str, _Bucket] = {}

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def _refilled(self, key: str, now_s: float) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                self._forget_full(now_s)
            bucket = self._buckets[key] = _Bucket(self.burst, now_s)
        else:
            bucket.tokens = min(self.burst, bucket.tokens + (now_s - bucket.at_s) * self.rate)
            bucket.at_s = now_s
        return bucket

    def wait_s(self, key: str, now_s: float, n: float = 1.0) -> float:
        """Seconds until ``n`` tokens are there (0: now), without spending any."""
        if not self.enabled:
            return 0.0
        bucket = self._refilled(key, now_s)
        missing = n - bucket.tokens
        return 0.0 if missing <= 0 else missing / self.rate

    def take(self, key: str, now_s: float, n: float = 1.0) -> float:
        """Spend ``n`` tokens if there (returns 0), else spend nothing and return the wait."""
        wait = self.wait_s(key, now_s, n)
        if wait == 0 and self.enabled:
            self._buckets[key].tokens -= n
        return wait

    def spend(self, key: str, now_s: float, n: float = 1.0) -> None:
        """Spend ``n`` tokens even if that goes below zero (failures already happened)."""
        if self.enabled:
            self._refilled(key, now_s).tokens -= n

    def _forget_full(self, now_s: float) -> None:
        for key, bucket in list(self._buckets.items()):
            if bucket.tokens + (now_s - bucket.at_s) * self.rate >= self.burst:
                del self._buckets[key]
        if len(self._buckets) >= self.max_keys:  # all limited: forget half, oldest first
            for key in list(self._buckets)[: self.max_keys // 2]:
                del self._buckets[key]


class FailedLogins:
    """Failed authentications, per credential ID and per peer address: ONE budget for every
    door a secret can be guessed at (the HTTP routes, schedules among them, and the worker
    hello), so a guesser gets one budget, not one per door."""

    def __init__(self, per_s: float, burst: float) -> None:
        self._buckets = TokenBuckets(per_s, burst)

    @staticmethod
    def keys(credential_id: str, peer: str) -> tuple[str, str]:
        """The buckets an attempt spends from (the credential ID as given, cut to its
        length: a bearer may carry anything before its dot)."""
        return f"id:{credential_id[:64]}", f"peer:{peer}"

    def wait_s(self, keys: tuple[str, str], now_s: float) -> float:
        """Seconds until an attempt with these keys may be verified (0: now)."""
        return max(self._buckets.wait_s(key, now_s) for key in keys)

    def failed(self, keys: tuple[str, str], now_s: float) -> None:
        """An attempt with these keys failed: it spends from each of them."""
        for key in keys:
            self._buckets.spend(key, now_s)


def retry_after(wait_s: float) -> int:
    """The Retry-After header value (whole seconds, at least 1)."""
    return max(1, math.ceil(wait_s))
