"""The paired test behind `veralith compare`: McNemar's exact test and Newcombe's interval.

Each matched trace is a pair of outcomes (passed in run A?, passed in run B?). Only the discordant
pairs carry information about a change: `b` passed in A and not in B, `c` the reverse. McNemar's
exact test asks whether b and c could be a fair coin's split of b + c (two-sided binomial p-value).
The 95 % interval on the pass-rate difference (B − A) is Newcombe's method 10 (1998): Wilson score
intervals of both rates combined with the correlation of the pairs. It needs no resampling, so
it is deterministic and costs microseconds, and unlike the Wald interval it stays inside [-1, 1]
and behaves with few discordant pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["PairedTest", "mcnemar_exact_p", "newcombe_interval", "paired_test", "wilson_interval"]

Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal


@dataclass(frozen=True)
class PairedTest:
    n: int                        # matched pairs
    both_pass: int                # a
    pass_to_not: int              # b: passed in A, not in B
    not_to_pass: int              # c: not in A, passed in B
    neither: int                  # d
    rate_a: float | None          # pass rate of A over the pairs
    rate_b: float | None
    difference: float | None      # rate_b - rate_a
    ci95: tuple[float, float] | None
    p_value: float | None         # McNemar exact, two-sided
    method: str = "McNemar exact test (two-sided); 95 % interval: Newcombe's method 10 (Wilson score, paired)"


def paired_test(a: int, b: int, c: int, d: int) -> PairedTest:
    """The test over a 2x2 table of pairs (a both pass, b pass→not, c not→pass, d neither)."""
    if min(a, b, c, d) < 0:
        raise ValueError("pair counts must be >= 0")
    n = a + b + c + d
    if n == 0:
        return PairedTest(0, 0, 0, 0, 0, None, None, None, None, None)
    rate_a, rate_b = (a + b) / n, (a + c) / n
    return PairedTest(n, a, b, c, d, rate_a, rate_b, (c - b) / n, newcombe_interval(a, b, c, d),
                      mcnemar_exact_p(b, c))


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: 2 · P(X ≤ min(b, c)) for X ~ Binomial(b + c, 1/2), at most 1."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    # Summed in log space: b + c can be in the thousands, where the binomial terms underflow.
    log_half_n = n * math.log(0.5)
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n for i in range(k + 1)]
    top = max(logs)
    tail = math.exp(top) * sum(math.exp(x - top) for x in logs)
    return min(1.0, 2.0 * tail)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion (n > 0)."""
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_interval(a: int, b: int, c: int, d: int, z: float = Z95) -> tuple[float, float]:
    """95 % interval of (a + c)/n − (a + b)/n, the paired difference B − A (Newcombe 1998, method 10)."""
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n          # pass rates of A and B
    l1, u1 = wilson_interval(a + b, n, z)
    l2, u2 = wilson_interval(a + c, n, z)
    denom = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / math.sqrt(denom) if denom else 0.0
    # Newcombe's interval for theta = p1 - p2 is (theta - delta, theta + epsilon); ours is -theta.
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    epsilon = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    diff = p2 - p1
    return max(-1.0, diff - epsilon), min(1.0, diff + delta)
