"""Deterministic question order and profile windows (DESIGN §7)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from datasets.profiles import DEFAULT_SEED, PROFILES, order_questions, select_window


@dataclass(frozen=True)
class Q:
    benchmark: str
    native_id: str
    subject: str


def make(n: int, strata: tuple[str, ...] = ("b", "a", "c"), benchmark: str = "gpqa") -> list[Q]:
    return [Q(benchmark, f"q{i}", strata[i % len(strata)]) for i in range(n)]


def expected_order(questions: list[Q], seed: int) -> list[str]:
    """Written independently of the implementation, straight from the rule."""

    def key(q: Q) -> str:
        raw = json.dumps([seed, q.native_id], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    by_stratum: dict[str, list[Q]] = {}
    for q in questions:
        by_stratum.setdefault(q.subject, []).append(q)
    lists = [sorted(by_stratum[s], key=key) for s in sorted(by_stratum)]
    out: list[str] = []
    i = 0
    while any(i < len(lst) for lst in lists):
        out.extend(lst[i].native_id for lst in lists if i < len(lst))
        i += 1
    return out


def test_order_matches_the_rule_computed_by_hand() -> None:
    questions = make(31, strata=("physics", "biology", "chemistry", "math"))
    ordered = order_questions(questions, seed=DEFAULT_SEED)
    assert [q.native_id for q in ordered] == expected_order(questions, DEFAULT_SEED)


def test_same_seed_same_order_regardless_of_input_order() -> None:
    questions = make(40)
    assert order_questions(questions, 7) == order_questions(list(reversed(questions)), 7)


def test_different_seed_different_order() -> None:
    questions = make(40)
    assert order_questions(questions, 1) != order_questions(questions, 2)


def test_strata_are_interleaved_round_robin_in_sorted_order() -> None:
    ordered = order_questions(make(9), DEFAULT_SEED)
    assert [q.subject for q in ordered] == ["a", "b", "c"] * 3


def test_uneven_strata_continue_with_the_remaining_ones() -> None:
    questions = [Q("gpqa", f"x{i}", "big") for i in range(5)] + [Q("gpqa", "y0", "small")]
    assert [q.subject for q in order_questions(questions, 3)] == ["big", "small"] + ["big"] * 4


def test_quick_and_standard_are_disjoint_and_standard_follows_quick() -> None:
    ordered = order_questions(make(300), DEFAULT_SEED)
    quick, quick_split, _ = select_window(ordered, "quick")
    standard, standard_split, _ = select_window(ordered, "standard")
    assert (quick_split, standard_split) == ("dev", "holdout")
    assert len(quick) == PROFILES["gpqa"].quick
    assert not {q.native_id for q in quick} & {q.native_id for q in standard}
    assert standard == ordered[len(quick) : len(quick) + PROFILES["gpqa"].standard]


def test_smoke_is_the_head_of_quick() -> None:
    ordered = order_questions(make(100), DEFAULT_SEED)
    smoke, split, short = select_window(ordered, "smoke")
    quick, _, _ = select_window(ordered, "quick")
    assert split == "dev" and not short
    assert smoke == quick[: len(smoke)] and len(smoke) == PROFILES["gpqa"].smoke


def test_short_source_is_marked_and_never_padded() -> None:
    ordered = order_questions(make(50), DEFAULT_SEED)  # gpqa standard wants 158 after 40
    standard, _, short = select_window(ordered, "standard")
    assert short and len(standard) == 10
    quick, _, quick_short = select_window(ordered, "quick")
    assert not quick_short and len(quick) == 40


def test_exact_size_is_not_short() -> None:
    ordered = order_questions(make(198), DEFAULT_SEED)
    standard, _, short = select_window(ordered, "standard")
    assert not short and len(standard) == 158


def test_empty_source_needs_the_benchmark_and_is_short() -> None:
    assert select_window([], "quick", benchmark="arc") == ([], "dev", True)


def test_profile_table_matches_design() -> None:
    table = {k: (p.smoke, p.quick, p.standard) for k, p in PROFILES.items()}
    assert table == {
        "mmlu-pro": (14, 500, 2000),
        "gpqa": (4, 40, 158),
        "hle": (4, 40, 200),
        "livecodebench": (2, 30, 150),
        "scicode": (1, 3, 20),
        "terminal-bench": (1, 3, 15),
        "simpleqa": (5, 100, 500),
        "arc": (2, 12, 80),
        "tau3": (3, 12, 60),
    }
