"""The savings bootstrap's resampled sums, drawn once per side (issue 38 item 5).

`srbench.savings_bootstrap` draws 2,000 resamples of every question: 1–2 s at 100,000
questions, most of it the generator's bounded integers. The resamples depend only on the
benchmarks' sizes, the draws and the seed, and a side's resampled sums (exact integers) only
on those and its own per-question costs — not on what it is paired with, nor on α. So each
side's sums are kept under the SHA-256 of exactly those (`ResampledCostSums`) and read back bit
for bit: a row can never be stale, only absent. The interval of a pair is then two rows and a
quantile. A run's end keeps the sums of each of its targets (`compare.services`'s run-end
hook), so a comparison of ended runs draws nothing; a side without a row is drawn with the
other missing sides in one batch and kept (concurrent readers may both compute; the first row
stays, and both are the same numbers).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from compare.models import ResampledCostSums
from srbench.savings_bootstrap import (
    SAVINGS_BOOTSTRAP_VERSION,
    SavingsInterval,
    resampled_cost_sums,
    savings_interval_from_sums,
)
from srbench.stats import DEFAULT_BOOTSTRAP_DRAWS, DEFAULT_BOOTSTRAP_SEED

Costs = Mapping[str, npt.ArrayLike]
Sums = npt.NDArray[np.int64]


def sums_key(side: Costs, *, draws: int, seed: int) -> str:
    """The address of one side's resampled sums: everything they are computed from."""
    h = hashlib.sha256()
    h.update(f"resampled-cost-sums v{SAVINGS_BOOTSTRAP_VERSION} {draws} {seed}".encode())
    for benchmark in sorted(side):
        values = np.ascontiguousarray(side[benchmark], dtype="<f8")
        h.update(f"\n{benchmark} {values.size}\n".encode())
        h.update(values.tobytes())
    return h.hexdigest()


def resampled_sums_kept(sides: Sequence[Costs], *, draws: int, seed: int) -> list[Sums | None]:
    """`resampled_cost_sums(sides, draws, seed)`, each side read from its row when one is
    kept; the missing known sides drawn in one batch and kept. A side with an unknown cost is
    None and drawn never (nothing is kept for it)."""
    keys = [sums_key(s, draws=draws, seed=seed) for s in sides]
    kept = dict(ResampledCostSums.objects.filter(key__in=set(keys)).values_list("key", "sums"))
    out: list[Sums | None] = [
        np.frombuffer(bytes(kept[k]), dtype="<i8") if k in kept else None for k in keys
    ]
    missing = [i for i, k in enumerate(keys) if k not in kept and _known(sides[i])]
    if not missing:
        return out
    computed = resampled_cost_sums([sides[i] for i in missing], draws=draws, seed=seed)
    rows = {}
    for i, sums in zip(missing, computed, strict=True):
        out[i] = sums
        if sums is not None:
            blob = sums.astype("<i8").tobytes()
            rows[keys[i]] = ResampledCostSums(key=keys[i], sums=blob)
    ResampledCostSums.objects.bulk_create(rows.values(), ignore_conflicts=True)
    return out


def savings_intervals(
    base: Costs,
    candidates: Sequence[Costs],
    *,
    draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    alpha: float,
) -> list[SavingsInterval | None]:
    """`savings_bootstrap_intervals(base, candidates, …)` from the sides' kept sums."""
    base_sums, *candidate_sums = resampled_sums_kept([base, *candidates], draws=draws, seed=seed)
    return [
        savings_interval_from_sums(base_sums, s, alpha=alpha, draws=draws, seed=seed)
        for s in candidate_sums
    ]


def _known(side: Costs) -> bool:
    return not any(np.isnan(np.asarray(v, dtype=np.float64)).any() for v in side.values())
