"""Issue 58 item 7: an IPv6 flood with a fresh /64 per request locked real newcomers out of the study.

From one /48, 205 rows were created in 25 s and 15 of 15 genuine newcomers from other addresses got 429. Now a
client is counted in its /64 and in the /56 and /48 around it, and a share of the study-wide budget of new rows
is kept for arrivals from networks that made no other start lately.
"""

from __future__ import annotations

import random

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from controversial.study.db import Participant
from controversial.study.network_limits import NetworkLimiter, client_keys
from controversial.study.scripted_participants import prolific_like_id
from controversial.study.server import RateLimitSettings

from .test_security_round2 import FromAddresses, arrive, make_app


def _fresh_64s(prefix48: str, n: int) -> list[str]:
    """A fresh /64 for every request, spread over the /56s of one /48 (``2001:db8:7``)."""
    return [f"{prefix48}:{(k % 256) << 8 | k // 256:x}::1" for k in range(n)]


def _rows(app) -> int:
    with app.state.sessions() as session:
        return session.scalar(select(func.count()).select_from(Participant))


def test_7_a_flood_from_fresh_64s_of_one_48_leaves_room_for_real_newcomers(small_bundle, tmp_path):
    limits = RateLimitSettings(sessions_per_minute=0.01)  # no refill during the test: the counts are exact
    app = make_app(small_bundle, tmp_path, rate_limit=limits)
    flood = _fresh_64s("2001:db8:7", 150)
    newcomers = [f"198.51.100.{n}" for n in range(1, 16)] + [f"2001:db8:{n + 100:x}::1" for n in range(5)]
    rng = random.Random(70)
    with TestClient(FromAddresses(app, flood + newcomers)) as client:
        flooded = [arrive(client, prolific_like_id(rng), prolific_like_id(rng)).status_code for _ in flood]
        genuine = [arrive(client, prolific_like_id(rng), prolific_like_id(rng)).status_code for _ in newcomers]
    assert flooded.count(200) == 80 and set(flooded[80:]) == {429}  # the /48's budget: 20 x 2 x 2
    assert genuine == [200] * len(newcomers)
    assert _rows(app) == 80 + len(newcomers)
    app.state.engine.dispose()


def test_7_a_flood_from_many_networks_cannot_take_the_reserve(small_bundle, tmp_path):
    """Twenty /48s, each flooding with fresh /64s, share out the unreserved 75 rows; the 25 reserved rows stay
    for arrivals from quiet networks."""
    limits = RateLimitSettings(new_participants_per_minute=0.01, new_participants_burst=100)
    app = make_app(small_bundle, tmp_path, rate_limit=limits)
    floods = [_fresh_64s(f"2001:db8:{n:x}", 10) for n in range(1, 21)]
    interleaved = [flood[k] for k in range(10) for flood in floods]  # round after round, every /48 once
    quiet = [f"203.0.113.{n}" for n in range(1, 26)]
    rng = random.Random(71)
    with TestClient(FromAddresses(app, interleaved + quiet)) as client:
        flooded = [arrive(client, prolific_like_id(rng), prolific_like_id(rng)).status_code for _ in interleaved]
        genuine = [arrive(client, prolific_like_id(rng), prolific_like_id(rng)).status_code for _ in quiet]
    # each /48's first arrival is quiet (it may take a reserved row); every later one only the unreserved 75
    assert flooded.count(200) == 75 and genuine == [200] * 25
    app.state.engine.dispose()


def test_7_a_client_is_counted_in_every_network_around_it():
    assert client_keys("2001:db8:7:1a2b:1:2:3:4", [64, 56, 48]) == [
        "2001:db8:7:1a2b::/64",
        "2001:db8:7:1a00::/56",
        "2001:db8:7::/48",
    ]
    assert client_keys("::ffff:192.0.2.7", [64, 56, 48]) == ["192.0.2.7"]  # IPv4-mapped: the IPv4 address
    now = [0.0]
    limiter = NetworkLimiter(per_minute=6, burst=2, ipv6_prefixes=[64, 48], widening=2, clock=lambda: now[0])
    assert limiter.retry_after("2001:db8::1") == 0 and limiter.quiet("2001:db8::1")
    assert limiter.retry_after("2001:db8:0:1::1") == 0 and not limiter.quiet("2001:db8:0:1::1")  # the /48 is busy
    assert [limiter.retry_after(f"2001:db8:0:{k}::1") for k in (2, 3)] == [0, 0]
    assert limiter.retry_after("2001:db8:0:4::1") > 0  # the /48's bucket (4) is empty, a fresh /64 or not
    now[0] = 60
    assert limiter.quiet("2001:db8:0:5::1")
