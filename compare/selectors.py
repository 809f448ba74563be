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

Queries per call are constant, whatever the number of runs. Step 1 (choose a baseline) is
counted and paged by the database (`BaselineOffer`, issue 38): the offer's facts of each run are
kept beside its packed cases (`PlanCases.offer_*`), group sizes are one window count, and options
are built for the page's runs only; step 2 reads the baseline's group (`comparable_pool`).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol, overload

from django.db import connection
from django.db.models import F, FloatField, Func, Q, Value
from django.db.models.functions import Cast, Coalesce, Extract, Lower

from compare.models import PlanCases
from compare.plan_cases import (
    kept_fingerprint,
    kept_head,
    offer_facts_fill,
    offer_fingerprint,
    offer_price_table,
    offer_single_slugs,
    offer_targets,
)
from runs.models import CELL_OUTCOMES, TERMINAL_RUN_STATUSES, Cell, CellStatus, Run, Target
from srbench.digits import ascii_digits

__all__ = [
    "RunOption",
    "BaselineOffer",
    "baseline_offer",
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
            for pk, plan, fp, raw_targets, prices in read:
                targets = offer_targets(raw_targets)
                singles = offer_single_slugs(targets)
                frozen = _Frozen(fp, targets, offer_price_table(prices), singles)
                _FROZEN[(pk, plan)] = frozen
                out[pk] = frozen
    return out


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


class _Priced(Protocol):
    """A run's id and normalised prices (an option, or a price table's representative)."""

    @property
    def id(self) -> int: ...

    @property
    def prices(self) -> dict[str, frozenset[tuple[str, Any]]] | None: ...


class _PriceIndex:
    """Per group: model → price → run ids, to find the runs one run's prices conflict with."""

    def __init__(self, members: Iterable[_Priced]):
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

    def incompatible_with(self, option: _Priced) -> set[int] | None:
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
    eligible = _eligible()
    # One row per run: what the offer shows, and its summary's count of cells without an
    # outcome (-1: no summary row, so its cells are read).
    counted = _without_outcome_count()
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


# --- step 1: the baseline offer, a page at a time -------------------------------------------


class _Table(NamedTuple):
    """One price table of a fingerprint group: its key, members, and one member to read."""

    fingerprint: str
    key: str | None
    members: int
    id: int
    prices: dict[str, frozenset[tuple[str, Any]]] | None = None


def _eligible() -> Any:
    """The runs that can take part in a comparison at all (`run_comparison_problems`)."""
    return Run.objects.filter(
        mode=Run.Mode.LIVE, status__in=TERMINAL_RUN_STATUSES, parent__isnull=True
    )


def _without_outcome_count() -> Coalesce:
    # A run's summary count of cells without an outcome; -1: no summary row, its cells are read.
    return Coalesce(sum((F(c) for c in _WITHOUT_OUTCOME), Value(0)), Value(-1))


def _offer_base(search: bool) -> tuple[str, tuple[Any, ...]]:
    """SQL of every eligible run with its kept offer facts (none where they are not kept yet)
    and its summary's count of cells without an outcome (-1: no summary row). Narrow rows: the
    name and search terms only for a search."""
    facts: dict[str, Any] = {
        "fp": F("plan_cases__fingerprint"),
        "prices": F("plan_cases__offer_prices"),
        "n_targets": F("plan_cases__offer_targets"),
        "n_singles": Func(F("plan_cases__offer_singles"), function="jsonb_array_length"),
        "lacking": _without_outcome_count(),
    }
    if search:
        facts |= {"terms": F("plan_cases__offer_terms"), "name_lower": Lower("name")}
    rows = _eligible().values("id", "created_at").annotate(**facts).order_by()
    sql, params = rows.query.sql_with_params()
    return sql, tuple(params)


def _reach(tables: list[_Table]) -> dict[tuple[str, str | None], int]:
    """Per price table of the groups with more than one (or a run pricing a model two ways):
    how many other runs of its group a member is comparable with. Tables are matched by the
    prices of one member each, through the same index the candidates are (`_PriceIndex`)."""
    heads = list(Run.objects.filter(pk__in=[t.id for t in tables]).values_list("pk", "plan_sha256"))
    frozen = _frozen(heads)
    by_group: dict[str, list[_Table]] = defaultdict(list)
    for t in tables:
        by_group[t.fingerprint].append(t._replace(prices=frozen[t.id].prices))
    out = {}
    for fingerprint, group in by_group.items():
        index = _PriceIndex(group)
        for t in group:
            bad = index.incompatible_with(t)
            out[fingerprint, t.key] = (
                0 if bad is None else sum(o.members for o in group if o.id not in bad) - 1
            )
    return out


def _price_tables(base: str, params: tuple[Any, ...]) -> list[_Table]:
    """Each price table of the groups that have more than one (or a run pricing a model two
    ways): its group, key, number of runs and one run's id."""
    groups = f"""
        WITH b AS MATERIALIZED ({base}),
        t AS (SELECT fp, prices, count(*) AS n, min(id) AS rep FROM b
              WHERE n_targets IS NOT NULL GROUP BY fp, prices)
        SELECT fp, prices, n, rep FROM t WHERE fp IN (
            SELECT fp FROM t GROUP BY fp HAVING count(*) > 1 OR bool_or(prices IS NULL))"""
    with connection.cursor() as cursor:
        cursor.execute(groups, params)
        return [_Table(*row) for row in cursor.fetchall()]


def _offer_facts_keep() -> None:
    """Keep the offer facts of the eligible runs that have none: ended before their cases were
    packed, or packed before the facts were kept."""
    gaps = _eligible().filter(
        Q(plan_cases__isnull=True) | Q(plan_cases__offer_targets__isnull=True)
    )
    rows = list(gaps.values_list("pk", "plan_cases__run_id"))
    offer_facts_fill([pk for pk, kept in rows if kept is None], [k for _, k in rows if k])


class _Read(NamedTuple):
    """One read of the offer: how many runs it offers, the runs whose facts are not kept,
    the groups priced more than one way that the read had no reach for, and a window's rows."""

    total: int
    missing: int
    unmatched: int
    rows: list[tuple[Any, ...]]


class BaselineOffer(Sequence[RunOption]):
    """Step 1 (R11.1) as a sequence the page's paginator and the API slice: runs with a single
    model that has a result for every planned case and at least one comparable candidate (or
    another target of their own: `RunOption.can_be_baseline`), newest first, narrowed by the
    search (`option_matches`: name, id, a target's slug or model). Counted and paged by the
    database from the kept offer facts (`PlanCases.offer_*`), so a page builds options for its
    own runs only (issue 38: 10,000 runs' options cost step 1 85–300 ms).

    ``window``: the slice the caller will ask for; the count is read with its rows, in one
    query (a page past the end costs a second)."""

    def __init__(self, q: str = "", *, window: tuple[int, int] = (0, 0)) -> None:
        self.q = q.strip().lower()
        self._reach: dict[tuple[str, str | None], int] = {}
        self._read: dict[tuple[int, int], _Read] = {}
        self._window = window

    def _rows(self, start: int, stop: int) -> _Read:
        for (begun, ended), read in self._read.items():
            if begun == start and ended >= stop:  # the window read with the count covers it
                return read._replace(rows=read.rows[: stop - start])
        if (start, stop) not in self._read:
            base, params = _offer_base(bool(self.q))
            read = _offer_read(base, params, self._reach, self.q, start, stop)
            if read.missing:  # some run's facts are not kept yet: keep them, once
                _offer_facts_keep()
            if read.unmatched or read.missing:
                self._reach = _reach(_price_tables(base, params))
                read = _offer_read(base, params, self._reach, self.q, start, stop)
            self._read[start, stop] = read
        return self._read[start, stop]

    def __len__(self) -> int:
        known = next(iter(self._read.values()), None)
        return (known or self._rows(*self._window)).total

    @overload
    def __getitem__(self, index: int) -> RunOption: ...

    @overload
    def __getitem__(self, index: slice) -> list[RunOption]: ...

    def __getitem__(self, index: int | slice) -> RunOption | list[RunOption]:
        if isinstance(index, int):
            found = self[index : index + 1] if index >= 0 else self[index:][:1]
            if not found:
                raise IndexError(index)
            return found[0]
        start, stop, step = index.indices(len(self))
        if stop <= start:
            return []
        return _options(self._rows(start, stop).rows)[::step]


def _offer_read(
    base: str,
    params: tuple[Any, ...],
    reach: dict[tuple[str, str | None], int],
    q: str,
    start: int,
    stop: int,
) -> _Read:
    """One query: the offer's count and checks, and the rows of ``[start, stop)`` newest first
    (id, plan, name, created epoch, status, comparable count, summary's cells without outcome).
    The offer rule of `RunOption.can_be_baseline` and the search of `option_matches`, in SQL.
    A run's comparable count is its group's size less one where the group has one price table,
    else its table's reach (`_reach`; a group without one is counted in ``unmatched``)."""
    digits = q.lstrip("#")
    by_id = int(digits) if ascii_digits(digits) and int(digits) < 2**63 else None
    cell, target = Cell._meta.db_table, Target._meta.db_table
    plans, runs = PlanCases._meta.db_table, Run._meta.db_table
    search = """
          AND (b.id = %s OR strpos(b.name_lower, %s) > 0 OR EXISTS (
              SELECT 1 FROM jsonb_array_elements_text(b.terms) AS w(term)
              WHERE strpos(w.term, %s) > 0))"""
    sql = f"""
        WITH b AS MATERIALIZED ({base}),
        g AS (SELECT fp, count(*) AS size,
                     min(prices COLLATE "C") <> max(prices COLLATE "C")
                     OR bool_or(prices IS NULL) AS priced_apart
              FROM b WHERE n_targets IS NOT NULL GROUP BY fp),
        x AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS x(fp, prices, reach)),
        o AS MATERIALIZED (
            SELECT b.id, b.created_at, coalesce(x.reach, g.size - 1) AS compatible, b.lacking
            FROM b JOIN g ON g.fp = b.fp
            LEFT JOIN x ON x.fp = b.fp AND x.prices IS NOT DISTINCT FROM b.prices
            WHERE b.n_singles > 0 AND (NOT g.priced_apart OR x.fp IS NOT NULL)
              AND (b.n_targets > 1 OR coalesce(x.reach, g.size - 1) > 0)
              AND (b.lacking = 0 OR EXISTS (
                  SELECT 1 FROM "{plans}" p, jsonb_array_elements_text(p.offer_singles) AS s(slug)
                  WHERE p.run_id = b.id AND NOT EXISTS (
                      SELECT 1 FROM "{cell}" c JOIN "{target}" t ON t.id = c.target_id
                      WHERE c.run_id = b.id AND t.kind = %s AND t.slug = s.slug
                        AND NOT (c.status = ANY(%s)))))
              {search if q else ""}),
        page AS (SELECT * FROM o ORDER BY created_at DESC, id DESC LIMIT %s OFFSET %s)
        SELECT (SELECT count(*) FROM o), (SELECT count(*) FROM b WHERE n_targets IS NULL),
               (SELECT count(*) FROM g WHERE priced_apart AND NOT (fp = ANY(%s::text[]))),
               r.id, r.plan_sha256, r.name, extract(epoch FROM r.created_at)::float8, r.status,
               page.compatible, page.lacking
        FROM (SELECT 1) AS one LEFT JOIN page ON true LEFT JOIN "{runs}" r ON r.id = page.id
        ORDER BY page.created_at DESC, page.id DESC"""
    keys = list(reach)
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            [
                *params,
                [fp for fp, _ in keys],
                [key for _, key in keys],
                [reach[k] for k in keys],
                Target.Kind.SINGLE,
                list(CELL_OUTCOMES),
                *([by_id, q, q] if q else []),
                stop - start,
                start,
                sorted({fp for fp, _ in keys}),
            ],
        )
        found = cursor.fetchall()
    total, missing, unmatched = found[0][:3]
    return _Read(total, missing, unmatched, [row[3:] for row in found if row[3] is not None])


def _options(rows: list[tuple[Any, ...]]) -> list[RunOption]:
    """The options of one page's rows (id, plan, name, created epoch, status, comparable count,
    summary's count of cells without an outcome), in order: frozen parts per process, baseline
    targets read."""
    frozen = _frozen([(r[0], r[1]) for r in rows])
    options = []
    for pk, _plan, name, created_epoch, status, compatible, _lacking in rows:
        options.append(
            RunOption(
                id=pk,
                name=name,
                created_epoch=created_epoch,
                status=status,
                targets=frozen[pk].targets,
                fingerprint=frozen[pk].fingerprint,
                prices=frozen[pk].prices,
                single_slugs=frozen[pk].single_slugs,
                compatible_count=compatible,
            )
        )
    _baseline_targets(options, {r[0] for r in rows if r[6] != 0})
    return options


def baseline_offer(q: str = "", *, window: tuple[int, int] = (0, 0)) -> BaselineOffer:
    """Step 1 (R11.1): the runs offered as a baseline, newest first, narrowed by the search;
    ``window``: the slice that will be read (its rows come with the count)."""
    return BaselineOffer(q, window=window)


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
