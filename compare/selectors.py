"""Which runs the Compare iterations page offers (SPEC R11.1–R11.3, issue 9).

Offering is a convenience; deciding is not: ``comparison_build`` re-verifies every pair with
``runs_differences`` on each comparison. The offer must still agree with that check, so it is
built from the same manifest fields (``COMPARED_FIELDS``), grouped rather than paired:

* cases (as a set), slots, benchmarks, sampling, limits and judges must be *equal*, which is an
  equivalence relation, so runs are grouped by a fingerprint of those parts. The database
  computes it (md5 over the canonical jsonb text, cases sorted and de-duplicated;
  `compare.plan_cases.offer_fingerprint`), so a megabyte manifest never leaves PostgreSQL; it
  is kept once per run when its cases are packed (`PlanCases.fingerprint`, at run end) and
  cached per process, because manifests are frozen.
* prices only have to agree on the models *both* runs price, which is not transitive, so they
  are checked inside a group through a per-model index of prices (no all-pairs loop when, as
  usual, a group prices each model one way).

Queries per call are constant, whatever the number of runs.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.db.models import F, FloatField, Q, Value
from django.db.models.functions import Cast, Coalesce, Extract

from compare.compatibility import model_prices
from compare.plan_cases import kept_fingerprint, kept_head, offer_fingerprint
from runs.models import CELL_OUTCOMES, TERMINAL_RUN_STATUSES, Cell, CellStatus, Run
from srbench.digits import ascii_digits

__all__ = [
    "RunOption",
    "baseline_options",
    "candidate_options",
    "comparable_pool",
    "option_matches",
]

# (run id, plan sha256) → what the page's offer reads of a run's frozen manifest: its
# fingerprint, targets and normalised prices. A run's manifest is written once, with the run,
# so an entry never goes stale; the size bound only caps memory in a long-lived worker.
_FROZEN: dict[tuple[int, str], _Frozen] = {}
_FROZEN_MAX = 100_000
_FROZEN_LOCK = threading.Lock()


class _Frozen(NamedTuple):
    fingerprint: str
    targets: list[dict[str, Any]]
    prices: dict[str, frozenset[tuple[str, Any]]] | None
    single_slugs: tuple[str, ...]


@dataclass(slots=True)
class RunOption:
    """One live, terminal, top-level run as the Compare page lists it."""

    id: int
    name: str
    # Seconds since the epoch: 10,000 runs' timestamps loaded as datetimes cost step 1 of the
    # page 20-30 ms; only the 25 shown are made datetimes (`created_at`).
    created_epoch: float
    status: str
    targets: list[dict[str, Any]]
    fingerprint: str
    # model → frozen price row; None when the run prices one model two ways (then it is
    # comparable with no other run: runs_differences reports the conflict for every partner).
    prices: dict[str, frozenset[tuple[str, Any]]] | None
    # Slugs of the single-model targets, in target order (from the frozen manifest).
    single_slugs: tuple[str, ...] = ()
    # Single-model targets with an outcome for every planned case.
    baseline_targets: tuple[str, ...] = ()
    compatible_count: int = 0  # other runs comparable with this one (the run itself not counted)

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(self.created_epoch, tz=UTC)

    @property
    def single_targets(self) -> list[dict[str, Any]]:
        return [t for t in self.targets if t.get("kind") == "single"]

    @property
    def can_be_baseline(self) -> bool:
        return bool(self.baseline_targets) and (self.compatible_count > 0 or len(self.targets) > 1)

    @property
    def self_comparable(self) -> bool:
        """A baseline run with other targets is its own candidate: they are compared with its
        strongest single model on exactly the same cases."""
        return len(self.targets) > 1

    @property
    def kinds(self) -> list[str]:
        return sorted({t.get("kind", "unknown") for t in self.targets})


def option_matches(option: RunOption, q: str) -> bool:
    """Search by name, id (``12`` or ``#12``) or a target's slug or model, case-insensitive."""
    q = q.strip().lower()
    if not q:
        return True
    if ascii_digits(q.lstrip("#")) and int(q.lstrip("#")) == option.id:
        return True
    if q in option.name.lower():
        return True
    return any(
        q in str(t.get("slug", "")).lower() or q in str(t.get("model", "")).lower()
        for t in option.targets
    )


def _frozen(rows: list[tuple[int, str]]) -> dict[int, _Frozen]:
    """The frozen parts of the offer of (id, plan sha256) pairs: from memory, the rest in one
    query (targets and prices from the kept manifest head where the run's cases were packed: a
    key of a toasted manifest costs a decompression of all of it, 9 ms a key at 100,000
    cases)."""
    out: dict[int, _Frozen] = {}
    missing = []
    for pk, plan in rows:
        cached = _FROZEN.get((pk, plan))
        if cached is None:
            missing.append(pk)
        else:
            out[pk] = cached
    if missing:
        fresh = Run.objects.filter(pk__in=missing).annotate(
            fp=Coalesce(kept_fingerprint(), offer_fingerprint()),
            m_targets=Coalesce(kept_head("targets"), F("manifest__targets")),
            m_prices=Coalesce(kept_head("prices"), F("manifest__prices")),
        )
        read = fresh.values_list("pk", "plan_sha256", "fp", "m_targets", "m_prices")
        with _FROZEN_LOCK:
            if len(_FROZEN) > _FROZEN_MAX:
                _FROZEN.clear()
            for pk, plan, fp, targets, prices in read:
                targets = targets if isinstance(targets, list) else []
                singles = tuple(t["slug"] for t in targets if t.get("kind") == "single")
                frozen = _Frozen(fp, targets, _prices(prices), singles)
                _FROZEN[(pk, plan)] = frozen
                out[pk] = frozen
    return out


def _prices(raw: Any) -> dict[str, frozenset[tuple[str, Any]]] | None:
    # The same normalisation as runs_differences ("3" and "3.0" are one price), reused so the
    # offer and the re-verification can never disagree about prices.
    table, conflicts = model_prices({"prices": raw if isinstance(raw, dict) else {}})
    if conflicts:
        return None
    return {model: frozenset(row.items()) for model, row in table.items()}


# A run's summary counts of the cell states that are not an outcome (runs.models.CELL_OUTCOMES).
_WITHOUT_OUTCOME = tuple(f"summary__{s}" for s in CellStatus.values if s not in CELL_OUTCOMES)


def _baseline_targets(options: list[RunOption], maybe_lacking: set[int]) -> None:
    """The offer of compatibility.baseline_refusal, read cheaply: a single model of a top-level
    run is planned on every case of its run (plans make target × case), so what decides is
    whether any of its cells is without an outcome; the comparison applies the whole rule
    again to its own counts when it is built. Only the runs in ``maybe_lacking`` have their
    cells read: the others' summary rows (cell counts by status, kept by triggers) say that
    none is pending, running, cancelled or of unknown fate."""
    scan = [o.id for o in options if o.single_slugs and o.id in maybe_lacking]
    lacking: set[tuple[int, str]] = set(
        Cell.objects.without_outcome()
        .filter(run_id__in=scan, target__kind="single")
        .values_list("run_id", "target__slug")
        .distinct()
    )
    lacking_runs = {run_id for run_id, _ in lacking}
    for o in options:
        # Shared, not copied, where nothing lacks: 10,000 runs' options allocate little, so a
        # page builds them without a full garbage collection every other request.
        o.baseline_targets = (
            tuple(slug for slug in o.single_slugs if (o.id, slug) not in lacking)
            if o.id in lacking_runs
            else o.single_slugs
        )


class _PriceIndex:
    """Per group: model → price → run ids, to find the runs one run's prices conflict with."""

    def __init__(self, members: Iterable[RunOption]):
        self.by_model: dict[str, dict[frozenset[tuple[str, Any]], set[int]]] = defaultdict(
            lambda: defaultdict(set)
        )
        self.conflicting_runs: set[int] = set()
        for o in members:
            if o.prices is None:
                self.conflicting_runs.add(o.id)
                continue
            for model, price in o.prices.items():
                self.by_model[model][price].add(o.id)

    @property
    def uniform(self) -> bool:
        """No member prices a model two ways and each model has one price in the group: then
        no member's prices conflict with another's."""
        return not self.conflicting_runs and all(len(p) == 1 for p in self.by_model.values())

    def incompatible_with(self, option: RunOption) -> set[int] | None:
        """Run ids of the group whose prices disagree with ``option``'s; None means all."""
        if option.prices is None:
            return None
        out = set(self.conflicting_runs)
        for model, price in option.prices.items():
            by_price = self.by_model[model]
            if len(by_price) > 1:  # the usual case, one price per model, costs nothing here
                for other_price, ids in by_price.items():
                    if other_price != price:
                        out |= ids
        out.discard(option.id)
        return out


def comparable_pool(baseline_id: int | None = None) -> dict[int, RunOption]:
    """Every run that can take part in a comparison at all (live, terminal, not a recovery
    child; ``run_comparison_problems``), with its fingerprint, prices and baseline targets,
    and how many other runs it is comparable with.

    With ``baseline_id``, only the runs of that run's fingerprint group (none when it cannot
    take part): all that its candidates and its own option depend on, since runs of other
    groups are never comparable with it. Step 2 of the page then counts price conflicts and
    reads the cells' summaries of its group only (issue 38: 10,000 runs took the page to 1 s).
    What a run's manifest gives its option is read once per process (`_frozen`)."""
    eligible = Run.objects.filter(
        mode=Run.Mode.LIVE, status__in=TERMINAL_RUN_STATUSES, parent__isnull=True
    )
    # One row per run: what the offer shows, and its summary's count of cells without an
    # outcome (-1: no summary row, so its cells are read).
    counted = Coalesce(sum((F(c) for c in _WITHOUT_OUTCOME), Value(0)), Value(-1))
    epoch = Cast(Extract("created_at", "epoch"), FloatField())
    columns = ("id", "plan_sha256", "name", "created_epoch", "status", "without_outcome")
    if baseline_id is None:
        shown = eligible.annotate(without_outcome=counted, created_epoch=epoch)
        shown = shown.order_by("created_at", "id")
        rows = list(shown.values_list(*columns))
        frozen = _frozen([(r[0], r[1]) for r in rows])
    else:
        base = list(eligible.filter(pk=baseline_id).values_list("id", "plan_sha256"))
        group = _frozen(base)[baseline_id].fingerprint if base else None
        # The group's members by their kept fingerprints (indexed), and the runs whose cases
        # were never packed (their fingerprint computed, then cached per process).
        maybe = eligible.filter(Q(plan_cases__fingerprint=group) | Q(plan_cases__isnull=True))
        heads = list(maybe.values_list("id", "plan_sha256"))
        frozen = _frozen(heads)
        ids = [pk for pk, _ in heads if frozen[pk].fingerprint == group]
        shown = eligible.filter(pk__in=ids).annotate(without_outcome=counted, created_epoch=epoch)
        rows = list(shown.order_by("created_at", "id").values_list(*columns))
    pool: dict[int, RunOption] = {}
    maybe_lacking: set[int] = set()
    for pk, _plan, name, created_epoch, status, without_outcome in rows:
        pool[pk] = RunOption(
            id=pk,
            name=name,
            created_epoch=created_epoch,
            status=status,
            targets=frozen[pk].targets,
            fingerprint=frozen[pk].fingerprint,
            prices=frozen[pk].prices,
            single_slugs=frozen[pk].single_slugs,
        )
        if without_outcome != 0:  # some cell may lack an outcome, or no summary row (-1)
            maybe_lacking.add(pk)
    groups: dict[str, list[RunOption]] = defaultdict(list)
    for o in pool.values():
        groups[o.fingerprint].append(o)
    for members in groups.values():
        index = _PriceIndex(members)
        uniform = index.uniform
        for o in members:
            bad = set() if uniform else index.incompatible_with(o)
            o.compatible_count = 0 if bad is None else len(members) - 1 - len(bad)
    _baseline_targets(list(pool.values()), maybe_lacking)
    return pool


def baseline_options(q: str = "", *, pool: dict[int, RunOption] | None = None) -> list[RunOption]:
    """Step 1 (R11.1): runs with a single model that has a result for every planned case and
    at least one comparable candidate; newest first, narrowed by the search."""
    pool = comparable_pool() if pool is None else pool
    offered = [o for o in pool.values() if o.can_be_baseline and option_matches(o, q)]
    # The pool is in creation order already (`comparable_pool`); newest first is its reverse.
    return offered[::-1]


def candidate_options(
    baseline_id: int, q: str = "", *, pool: dict[int, RunOption] | None = None
) -> list[RunOption]:
    """Step 2 (R11.2, R11.3): every run comparable with the baseline run, in creation order,
    narrowed by the search. The baseline run itself is listed when it holds other targets."""
    pool = comparable_pool(baseline_id) if pool is None else pool
    base = pool.get(baseline_id)
    if base is None:
        return []
    members = [o for o in pool.values() if o.fingerprint == base.fingerprint]
    bad = _PriceIndex(members).incompatible_with(base)
    out = []
    for o in members:
        if o.id == base.id:
            comparable = base.self_comparable
        else:
            comparable = bad is not None and o.id not in bad
        if comparable and option_matches(o, q):
            out.append(o)
    return sorted(out, key=lambda o: (o.created_epoch, o.id))
