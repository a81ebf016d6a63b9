"""Session starts counted per client network, and who may draw on the study-wide reserve of new rows.

An IPv4 client is its address. An IPv6 subscriber holds at least a /64, often a /56 or a /48, so counting
addresses counts nothing and counting /64s alone let one /48 start 205 sessions in 25 s from a fresh /64 per
request (and exhaust the study-wide budget of new rows, locking out every real newcomer). So an IPv6 client is
counted in its /64 and in each wider network around it (by default /56 and /48), each wider network with
``widening`` times the budget of the one inside it: a household or a small site keeps the budget of one client,
a whole /48 at most a few times it, whatever addresses it uses.

A *quiet* network is one whose every bucket was full before this start (no other start from it lately): the
study keeps a share of its budget of new rows (``new_participants_reserve``) that only arrivals from quiet
networks may take, so a flood from one network, however many addresses it spreads over, cannot take it.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Callable, Sequence

from controversial.study.guards import RateLimiter


def client_keys(host: str, ipv6_prefixes: Sequence[int]) -> list[str]:
    """The networks a client is counted in: an IPv4 address (an IPv4-mapped IPv6 address is its IPv4 address),
    or the IPv6 networks of each of ``ipv6_prefixes`` bits around the address."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return [host]  # "unknown", or a name from a test client
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return [str(address.ipv4_mapped)]
        return [str(ipaddress.IPv6Network((address, prefix), strict=False)) for prefix in ipv6_prefixes]
    return [str(address)]


class NetworkLimiter:
    """A token bucket per client network at each prefix length; a start is allowed only when every network the
    client is in allows it, and then counts in each."""

    def __init__(
        self,
        per_minute: float,
        burst: int,
        ipv6_prefixes: Sequence[int],
        widening: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prefixes = tuple(ipv6_prefixes)
        self.levels = [
            RateLimiter(per_minute * widening**level, round(burst * widening**level), clock=clock)
            for level in range(len(self.prefixes))
        ]

    def _buckets(self, host: str) -> list[tuple[RateLimiter, str]]:
        return list(zip(self.levels, client_keys(host, self.prefixes), strict=False))  # IPv4: the first level only

    def retry_after(self, host: str) -> float:
        """Take one start for ``host``: 0 if every network it is in allows it, else the seconds to wait."""
        buckets = self._buckets(host)
        wait = max(limiter.retry_after(key, take=False) for limiter, key in buckets)
        if wait:
            return wait
        for limiter, key in buckets:
            limiter.retry_after(key)
        return 0.0

    def quiet(self, host: str) -> bool:
        """Whether ``host``'s networks had no other start lately (every bucket at most one below full, after
        the start just taken)."""
        return all(limiter.tokens(key) >= limiter.burst - 1 for limiter, key in self._buckets(host))
