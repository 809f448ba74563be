"""`benchmark prepare | datasets | compose | questions`: dataset verbs, through the API like
every other verb (over HTTP with --url, else in-process through the same views).

`prepare --source-path` names a file or folder on the machine that serves the API: the local
machine in-process, the server with --url (operators only). `prepare --from-package [PACKAGE]`
reads the benchmark's public data in place from its installed registry package
(datasets.packages); with `--benchmark all` it prepares every packaged benchmark. Errors are one
line on stderr and exit code 2, so a script can tell bad input from a crash.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datasets.benchmarks import ADAPTERS
from datasets.models import Profile
from datasets.packages import PACKAGED
from datasets.profiles import DEFAULT_SEED
from datasets.selectors import PROFILE_TOTAL_LABEL
from srbench.api_client import (
    ApiClient,
    ApiUnreachable,
    CliError,
    add_connection_arguments,
    api_error_message,
    cli_error,
    cli_guard,
    client_from,
)

PAGE = 100  # the API's largest page


def register(verbs: Any) -> None:
    p = verbs.add_parser("prepare", help="prepare frozen question sources from official files")
    p.add_argument("--benchmark", required=True, choices=[*ADAPTERS, "all"])
    p.add_argument("--profile", required=True, choices=Profile.values)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument(
        "--source-path",
        default=None,
        help="official file or folder on the API's machine (default: the bundled fixture); "
        "one benchmark only",
    )
    p.add_argument(
        "--from-package",
        nargs="?",
        const="",
        default=None,
        metavar="PACKAGE",
        help="read the public data in place from the installed package that carries it "
        f"({', '.join(f'{k}: {e.distribution}' for k, e in PACKAGED.items())}); "
        "PACKAGE, if given, must be that distribution",
    )
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(prepare))

    p = verbs.add_parser("datasets", help="list prepared sources, profile totals and datasets")
    p.add_argument("--profile", choices=Profile.values, default=None)
    p.add_argument("--benchmark", choices=list(ADAPTERS), default=None)
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(datasets))

    p = verbs.add_parser("compose", help="compose prepared sources into a frozen dataset")
    p.add_argument("--source", type=int, action="append", required=True, dest="sources")
    p.add_argument("--benchmark", action="append", choices=list(ADAPTERS), dest="benchmarks")
    p.add_argument("--name", default=None)
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(compose))

    p = verbs.add_parser("questions", help="a frozen dataset's questions (public payload only)")
    p.add_argument("dataset_id", type=int, metavar="DATASET_ID")
    p.add_argument("--benchmark", choices=list(ADAPTERS), default=None)
    p.add_argument("--subject", default=None)
    p.add_argument("--search", default=None, help="text in the id, subject or payload")
    p.add_argument("--page", type=int, default=1)
    p.add_argument("--page-size", type=int, default=25, help="at most 100")
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(questions))


def _call(client: ApiClient, method: str, path: str, **kwargs: Any) -> Any:
    response = client.request(method, path, **kwargs)
    if response.status_code not in (200, 201):
        raise CliError(api_error_message(response))
    return response.json()


def _all_pages(client: ApiClient, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of a growing list through the keyset cursor: rows added while reading
    neither shift nor repeat a page."""
    rows: list[dict[str, Any]] = []
    cursor = 0
    while True:
        page = _call(client, "GET", path, params={**params, "before": cursor, "page_size": PAGE})
        rows += page["results"]
        if page["next_before"] is None:
            return rows
        cursor = page["next_before"]


def _source_line(source: dict[str, Any]) -> str:
    short = "SHORT" if source["short"] else "full"
    synthetic = " synthetic" if source["synthetic"] else ""
    where = f"{source['benchmark']}/{source['profile']}/{source['seed']}/{source['split']}"
    return (
        f"{where}  source #{source['id']}  {source['count']}/{source['requested_count']} "
        f"questions ({short}{synthetic})  sha256 {source['content_sha256']}"
    )


def prepare(options: dict[str, Any]) -> int:
    from_package = options.get("from_package")
    if from_package is not None and options["source_path"]:
        return cli_error("choose either --source-path or --from-package, not both")
    if options["benchmark"] != "all":
        benchmarks = [options["benchmark"]]
    elif from_package is not None:
        if from_package:
            return cli_error("--from-package PACKAGE belongs to one benchmark; use --benchmark KEY")
        benchmarks = list(PACKAGED)
    else:
        benchmarks = list(ADAPTERS)
    if options["source_path"] and len(benchmarks) > 1:
        return cli_error("--source-path belongs to one benchmark; use it with --benchmark KEY")
    client = client_from(options)
    body: dict[str, Any] = {"profile": options["profile"], "seed": options["seed"]}
    if from_package is not None:
        body["from_package"] = True
        if from_package:
            body["package"] = from_package
    if options["source_path"]:
        # In-process the path is this machine's; make it independent of the server's cwd.
        body["source_path"] = str(Path(options["source_path"]).expanduser().absolute())
    code = 0
    receipts = []
    for benchmark in benchmarks:
        try:
            receipt = _call(
                client, "POST", "sources/prepare/", json={**body, "benchmark": benchmark}
            )
        except ApiUnreachable:
            raise  # the others would wait for the same API in vain
        except CliError as exc:
            # Keep going with the other benchmarks: each source is independent.
            code = cli_error(f"{benchmark}: {exc}", exc.exit_code)
            continue
        receipts.append(receipt)
        if not options.get("json"):
            status = "prepared" if receipt["created"] else "unchanged"
            print(f"{status}  {_source_line(receipt['source'])}")
    if options.get("json"):
        print(json.dumps(receipts, indent=2))
    return code


def datasets(options: dict[str, Any]) -> int:
    client = client_from(options)
    filters = {k: options[k] for k in ("profile", "benchmark") if options.get(k)}
    sources = _all_pages(client, "sources/", filters)
    found = _all_pages(client, "datasets/", filters)
    totals = [
        t
        for t in _call(client, "GET", "datasets/totals/")
        if options["profile"] in (None, t["profile"])
    ]
    if options.get("json"):
        document = {"sources": sources, "profile_totals": totals, "datasets": found}
        print(json.dumps(document, indent=2, default=str))
        return 0
    print("Prepared sources")
    for source in sources:
        print(f"  {_source_line(source)}")
    if not sources:
        print("  (none: run `benchmark prepare`)")
    print(f"Profile totals — {PROFILE_TOTAL_LABEL}")
    for t in totals:
        print(f"  {t['profile']:<9} {t['total']:>6} questions in {t['sources']} prepared set(s)")
    print("Frozen datasets")
    for dataset in found:
        print(
            f"  #{dataset['id']}  {dataset['name']}  "
            f"{dataset['profile']}/{dataset['seed']}/{dataset['split']}  "
            f"{dataset['question_count']} questions  identity {dataset['identity_sha256'][:16]}"
        )
    if not found:
        print("  (none: run `benchmark compose`)")
    return 0


def compose(options: dict[str, Any]) -> int:
    body: dict[str, Any] = {"sources": options["sources"]}
    if options.get("benchmarks"):
        body["benchmarks"] = options["benchmarks"]
    if options.get("name"):
        body["name"] = options["name"]
    receipt = _call(client_from(options), "POST", "datasets/compose/", json=body)
    if options.get("json"):
        print(json.dumps(receipt, indent=2, default=str))
        return 0
    dataset = receipt["dataset"]
    status = "composed" if receipt["created"] else "reused"
    print(
        f"{status}  dataset #{dataset['id']}  {dataset['name']}  "
        f"{dataset['question_count']} questions  identity {dataset['identity_sha256']}  "
        f"model requests: {receipt['model_requests']}"
    )
    return 0


def _question_text(payload: dict[str, Any]) -> str:
    for key in ("question", "problem", "prompt", "instruction", "task"):
        if isinstance(payload.get(key), str):
            return " ".join(payload[key].split())
    return json.dumps(payload, ensure_ascii=False)


def questions(options: dict[str, Any]) -> int:
    params: dict[str, Any] = {"page": options["page"], "page_size": options["page_size"]}
    for key, param in (("benchmark", "benchmark"), ("subject", "subject"), ("search", "q")):
        if options.get(key):
            params[param] = options[key]
    page = _call(
        client_from(options), "GET", f"datasets/{options['dataset_id']}/questions/", params=params
    )
    if options.get("json"):
        print(json.dumps(page, indent=2, ensure_ascii=False))
        return 0
    for q in page["results"]:
        text = _question_text(q["payload"])
        text = text if len(text) <= 80 else text[:79] + "…"
        print(
            f"{q['position'] if q['position'] is not None else '-':>5}  {q['benchmark']:<14} "
            f"{q['native_id']:<24} {q['subject'] or '-':<18} {text}"
        )
    if not page["results"]:
        print("no questions")
    shown = len(page["results"])
    first = (options["page"] - 1) * options["page_size"]
    more = f"; next: --page {options['page'] + 1}" if page["next"] else ""
    print(f"questions {first + 1 if shown else 0}–{first + shown} of {page['count']}{more}")
    return 0
