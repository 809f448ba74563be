"""The nine sr-bench adapters, in SPEC R4.1 order."""

from __future__ import annotations

from datasets.benchmarks import (
    arc,
    gpqa,
    hle,
    livecodebench,
    mmlu_pro,
    scicode,
    simpleqa,
    tau3,
    terminal_bench,
)
from datasets.benchmarks.base import (
    BenchmarkAdapter,
    LoadedQuestion,
    LoaderError,
    LoadResult,
)

Adapter = BenchmarkAdapter

ADAPTERS: dict[str, Adapter] = {
    adapter.key: adapter
    for adapter in (
        mmlu_pro.ADAPTER,
        simpleqa.ADAPTER,
        gpqa.ADAPTER,
        hle.ADAPTER,
        arc.ADAPTER,
        livecodebench.ADAPTER,
        scicode.ADAPTER,
        terminal_bench.ADAPTER,
        tau3.ADAPTER,
    )
}

if sum(a.weight for a in ADAPTERS.values()) != 1:  # pragma: no cover - import-time invariant
    raise AssertionError("sr-bench weights must sum to exactly 1 (SPEC R4.1)")


def get_adapter(key: str) -> Adapter:
    try:
        return ADAPTERS[key]
    except KeyError:
        known = ", ".join(ADAPTERS)
        raise KeyError(f"unknown benchmark {key!r}; known benchmarks: {known}") from None


__all__ = [
    "ADAPTERS",
    "Adapter",
    "BenchmarkAdapter",
    "LoadResult",
    "LoadedQuestion",
    "LoaderError",
    "get_adapter",
]
