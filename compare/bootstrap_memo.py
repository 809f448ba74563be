"""The savings bootstrap's intervals, computed once per set of inputs (issue 38 item 5).

`srbench.stats.savings_bootstrap_intervals` draws 2,000 resamples of every question: 1–2 s at
100,000 cases, most of it the generator's bounded integers, and every Compare page, card page,
export and CLI comparison drew them again. Each candidate's interval depends only on its
inputs — the algorithm (`SAVINGS_BOOTSTRAP_VERSION`), draws, seed, α, and both sides'
per-question costs benchmark by benchmark (a batch gives every candidate what a lone call would
draw) — so it is kept under the SHA-256 of exactly those (`SavingsIntervalMemo`) and read back
bit for bit: a row can never be stale, only absent. A miss computes the missing candidates in
one batch and keeps them (concurrent readers may both compute; the first row stays, and both
are the same numbers).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from compare.models import SavingsIntervalMemo
from srbench.stats import (
    DEFAULT_BOOTSTRAP_DRAWS,
    DEFAULT_BOOTSTRAP_SEED,
    SAVINGS_BOOTSTRAP_VERSION,
    SavingsInterval,
    savings_bootstrap_intervals,
)

Costs = Mapping[str, npt.ArrayLike]


def memo_key(base: Costs, candidate: Costs, *, draws: int, seed: int, alpha: float) -> str:
    """The address of one candidate's interval: everything it is computed from."""
    h = hashlib.sha256()
    h.update(f"savings-bootstrap v{SAVINGS_BOOTSTRAP_VERSION} {draws} {seed} {alpha!r}".encode())
    for benchmark in sorted(base):
        for side in (base, candidate):
            values = np.ascontiguousarray(side.get(benchmark, ()), dtype="<f8")
            h.update(f"\n{benchmark} {values.size}\n".encode())
            h.update(values.tobytes())
    h.update(f"\n{sorted(candidate)}".encode())
    return h.hexdigest()


def savings_intervals(
    base: Costs,
    candidates: Sequence[Costs],
    *,
    draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    alpha: float,
) -> list[SavingsInterval | None]:
    """`savings_bootstrap_intervals(base, candidates, …)`, each candidate's read from its memo
    row when one is kept, the rest computed (in one batch) and kept."""
    keys = [memo_key(base, c, draws=draws, seed=seed, alpha=alpha) for c in candidates]
    kept = {m.key: m for m in SavingsIntervalMemo.objects.filter(key__in=set(keys))}
    out: list[SavingsInterval | None] = [None] * len(candidates)
    missing = []
    for i, key in enumerate(keys):
        row = kept.get(key)
        if row is None:
            missing.append(i)
        elif row.lower is not None and row.upper is not None:
            out[i] = SavingsInterval(row.lower, row.upper, alpha, draws, seed)
    if not missing:
        return out
    computed = savings_bootstrap_intervals(
        base, [candidates[i] for i in missing], draws=draws, seed=seed, alpha=alpha
    )
    rows = {}
    for i, interval in zip(missing, computed, strict=True):
        out[i] = interval
        rows[keys[i]] = SavingsIntervalMemo(
            key=keys[i],
            lower=None if interval is None else interval.lower,
            upper=None if interval is None else interval.upper,
        )
    SavingsIntervalMemo.objects.bulk_create(rows.values(), ignore_conflicts=True)
    return out
