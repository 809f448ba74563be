"""Run profiles and the one deterministic question order every prepare uses (DESIGN §7).

Order: within each stratum, sort by sha256(canonical JSON of [seed, native_id]); then take the
strata round-robin in sorted order of their names. smoke and quick read the head of that order
(split "dev"); standard reads the window right after quick (split "holdout"), so a model tuned
on quick has never seen a standard question. A source with too few questions is short, never
padded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from srbench.canonical import sha256_hex

DEFAULT_SEED = 20260918

ProfileName = Literal["smoke", "quick", "standard"]
SplitName = Literal["dev", "holdout"]
PROFILE_NAMES: tuple[ProfileName, ...] = ("smoke", "quick", "standard")
PROFILE_SPLIT: dict[ProfileName, SplitName] = {
    "smoke": "dev",
    "quick": "dev",
    "standard": "holdout",
}


@dataclass(frozen=True)
class ProfileCounts:
    smoke: int
    quick: int
    standard: int

    def __post_init__(self) -> None:
        # smoke is a prefix of quick; a larger smoke would silently reach into other data.
        if not 0 < self.smoke <= self.quick:
            raise ValueError("smoke must be a positive prefix of quick")

    def count(self, profile: ProfileName) -> int:
        return {"smoke": self.smoke, "quick": self.quick, "standard": self.standard}[profile]


PROFILES: dict[str, ProfileCounts] = {
    "mmlu-pro": ProfileCounts(14, 500, 2000),
    "simpleqa": ProfileCounts(5, 100, 500),
    "gpqa": ProfileCounts(4, 40, 158),
    "hle": ProfileCounts(4, 40, 200),
    "arc": ProfileCounts(2, 12, 80),
    "livecodebench": ProfileCounts(2, 30, 150),
    "scicode": ProfileCounts(1, 3, 20),
    "terminal-bench": ProfileCounts(1, 3, 15),
    "tau3": ProfileCounts(3, 12, 60),
}


class Orderable(Protocol):
    @property
    def benchmark(self) -> str: ...
    @property
    def native_id(self) -> str: ...
    @property
    def subject(self) -> str: ...


def order_key(seed: int, native_id: str) -> str:
    return sha256_hex([seed, native_id])


def order_questions[Q: Orderable](questions: Sequence[Q], seed: int = DEFAULT_SEED) -> list[Q]:
    """Deterministic order independent of input order: the same questions and seed give the
    same list on every machine, so a prepared source can be rebuilt and verified by hash."""
    strata: dict[str, list[Q]] = defaultdict(list)
    for question in questions:
        strata[question.subject].append(question)
    queues = [
        sorted(strata[name], key=lambda q: (order_key(seed, q.native_id), q.native_id))
        for name in sorted(strata)
    ]
    ordered: list[Q] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        ordered.extend(queue[depth] for queue in queues if depth < len(queue))
    return ordered


def select_window[Q: Orderable](
    ordered: Sequence[Q], profile: ProfileName, *, benchmark: str | None = None
) -> tuple[list[Q], SplitName, bool]:
    """(selected, split, short) for one benchmark's ordered questions under a profile.

    `benchmark` defaults to the questions' own benchmark; it is needed only for an empty list.
    """
    if profile not in PROFILE_SPLIT:
        raise ValueError(f"unknown profile {profile!r}; expected one of {PROFILE_NAMES}")
    if benchmark is None:
        if not ordered:
            raise ValueError("benchmark is required when there are no questions")
        benchmark = ordered[0].benchmark
    counts = PROFILES[benchmark]
    if profile == "standard":
        start, size = counts.quick, counts.standard
    else:
        start, size = 0, counts.count(profile)
    selected = list(ordered[start : start + size])
    return selected, PROFILE_SPLIT[profile], len(selected) < size
