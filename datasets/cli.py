"""`benchmark prepare | datasets | compose`: thin verbs over datasets.services and selectors.

Preparation reads local official files, so it runs in-process on the machine that holds them.
Errors are one line on stderr and exit code 2, so a script can tell bad input from a crash.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from datasets.benchmarks import ADAPTERS, LoaderError
from datasets.models import Profile, Source
from datasets.profiles import DEFAULT_SEED
from datasets.selectors import PROFILE_TOTAL_LABEL, dataset_list, profile_totals, source_list
from datasets.services import (
    CompositionConflict,
    CompositionInvalid,
    PreparationConflict,
    dataset_compose_receipt,
    source_prepare_receipt,
)

EXIT_INPUT_ERROR = 2


def register(verbs: Any) -> None:
    p = verbs.add_parser("prepare", help="prepare frozen question sources from official files")
    p.add_argument("--benchmark", required=True, choices=[*ADAPTERS, "all"])
    p.add_argument("--profile", required=True, choices=Profile.values)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument(
        "--source-path",
        default=None,
        help="official file or folder (default: the bundled fixture); one benchmark only",
    )
    p.set_defaults(handler=prepare)

    p = verbs.add_parser("datasets", help="list prepared sources, profile totals and datasets")
    p.add_argument("--profile", choices=Profile.values, default=None)
    p.add_argument("--benchmark", choices=list(ADAPTERS), default=None)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=datasets)

    p = verbs.add_parser("compose", help="compose prepared sources into a frozen dataset")
    p.add_argument("--source", type=int, action="append", required=True, dest="sources")
    p.add_argument("--benchmark", action="append", choices=list(ADAPTERS), dest="benchmarks")
    p.add_argument("--name", default=None)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=compose)


def _error(message: str) -> int:
    # One line: loader messages name file/row/field and must stay greppable in CI logs.
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_INPUT_ERROR


def _source_line(source: Source) -> str:
    short = "SHORT" if source.short else "full"
    synthetic = " synthetic" if source.synthetic else ""
    return (
        f"{source}  source #{source.pk}  {source.count}/{source.requested_count} questions "
        f"({short}{synthetic})  sha256 {source.content_sha256}"
    )


def prepare(options: dict[str, Any]) -> int:
    benchmarks = list(ADAPTERS) if options["benchmark"] == "all" else [options["benchmark"]]
    if options["source_path"] and len(benchmarks) > 1:
        return _error("--source-path belongs to one benchmark; use it with --benchmark KEY")
    code = 0
    for benchmark in benchmarks:
        try:
            receipt = source_prepare_receipt(
                benchmark=benchmark,
                profile=options["profile"],
                seed=options["seed"],
                source_path=options["source_path"],
            )
        except (LoaderError, PreparationConflict, ValueError) as exc:
            # Keep going with the other benchmarks: each source is independent.
            code = _error(f"{benchmark}: {exc}")
            continue
        status = "prepared" if receipt.created else "unchanged"
        print(f"{status}  {_source_line(receipt.source)}")
    return code


def datasets(options: dict[str, Any]) -> int:
    from datasets.serializers import DatasetListSerializer, SourceSerializer

    sources = source_list(benchmark=options["benchmark"], profile=options["profile"])
    found = dataset_list(profile=options["profile"], benchmark=options["benchmark"])
    totals = [t for t in profile_totals() if options["profile"] in (None, t.profile)]
    if options["json"]:
        document = {
            "sources": SourceSerializer(sources, many=True).data,
            "profile_totals": [
                {"profile": t.profile, "total": t.total, "sources": t.sources, "label": t.label}
                for t in totals
            ],
            "datasets": DatasetListSerializer(found, many=True).data,
        }
        print(json.dumps(document, indent=2, default=str))
        return 0
    print("Prepared sources")
    for source in sources:
        print(f"  {_source_line(source)}")
    if not sources:
        print("  (none: run `benchmark prepare`)")
    print(f"Profile totals — {PROFILE_TOTAL_LABEL}")
    for t in totals:
        print(f"  {t.profile:<9} {t.total:>6} questions in {t.sources} prepared set(s)")
    print("Frozen datasets")
    for dataset in found:
        print(
            f"  #{dataset.pk}  {dataset.name}  {dataset.profile}/{dataset.seed}/{dataset.split}  "
            f"{dataset.question_count} questions  identity {dataset.identity_sha256[:16]}"
        )
    if not found:
        print("  (none: run `benchmark compose`)")
    return 0


def compose(options: dict[str, Any]) -> int:
    wanted = options["sources"]
    sources = list(Source.objects.filter(pk__in=wanted))
    missing = sorted(set(wanted) - {s.pk for s in sources})
    if missing:
        return _error(f"unknown source id(s): {', '.join(map(str, missing))}")
    try:
        receipt = dataset_compose_receipt(
            sources=sources, benchmarks=options["benchmarks"], name=options["name"]
        )
    except CompositionInvalid as exc:
        return _error(str(exc))
    except CompositionConflict as exc:
        return _error("conflict: " + " | ".join(c["detail"] for c in exc.conflicts))
    dataset = receipt.dataset
    if options["json"]:
        from datasets.serializers import DatasetListSerializer

        row = dataset_list().get(pk=dataset.pk)
        document = {
            "dataset": DatasetListSerializer(row).data,
            "created": receipt.created,
            "model_requests": receipt.model_requests,
        }
        print(json.dumps(document, indent=2, default=str))
        return 0
    status = "composed" if receipt.created else "reused"
    count = dataset_list().get(pk=dataset.pk).question_count
    print(
        f"{status}  dataset #{dataset.pk}  {dataset.name}  {count} questions  "
        f"identity {dataset.identity_sha256}  model requests: {receipt.model_requests}"
    )
    return 0
