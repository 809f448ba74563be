"""A file the CLI cannot write or read (issue 19): one `error:` line naming it and exit 2,
never a traceback (exit 1). `--output` paths that cannot be written, and `--plan-file`,
`--plan` and `--messages-file` contents the API would refuse (too deep, a lone surrogate, NUL,
NaN), over HTTP and in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.conftest import seed
from tests.conftest import purge_broker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_stray_doorbells():  # type: ignore[no-untyped-def]
    purge_broker()
    yield
    purge_broker()


def unwritable(tmp_path: Path) -> list[Path]:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    # Root ignores permission bits, so these fail for every user: a missing folder, a folder,
    # and a path under a regular file.
    return [tmp_path / "missing" / "out.json", tmp_path, a_file / "out.json"]


def one_error_line(result) -> bool:  # type: ignore[no-untyped-def]
    lines = result.err.strip().splitlines()
    return (
        result.code == 2
        and len(lines) == 1
        and lines[0].startswith("error: ")
        and "Traceback" not in result.out + result.err
    )


def test_recover_plan_to_an_unwritable_output_is_one_error_line(bench, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = seed().run
    for path in unwritable(tmp_path):
        r = bench("recover-plan", str(run.pk), "--mode", "failed", "--output", str(path))
        assert one_error_line(r), (path, r)
        assert f"cannot write recovery plan {path}" in r.err
    good = tmp_path / "plan.json"
    assert bench("recover-plan", str(run.pk), "--mode", "failed", "--output", str(good)).code == 0
    assert good.read_text().startswith("{")


def test_plan_manifest_to_an_unwritable_output_is_one_error_line(bench, tmp_path) -> None:  # type: ignore[no-untyped-def]
    seeded = seed()
    plan = ["plan", "--dataset", str(seeded.dataset_id), "--target", seeded.target_slug]
    assert bench(*plan).code == 0
    for path in unwritable(tmp_path):
        r = bench(*plan, "--output", str(path))
        assert one_error_line(r), (path, r)
        assert f"cannot write manifest {path}" in r.err


HOSTILE_FILES = {
    "too deep": "[" * 100 + "]" * 100,
    "far too deep": "[" * 100_000 + "]" * 100_000,
    "lone surrogate": '{"name": "\\ud800", "selected_cells": ["\\udfff"]}',
    "NUL": '{"name": "a\\u0000b"}',
    "NaN": '{"name": NaN}',
    "infinite": '{"name": 1e999}',
}


def test_input_files_the_api_would_refuse_are_one_error_line(bench, tmp_path) -> None:  # type: ignore[no-untyped-def]
    files = {label: tmp_path / f"{i}.json" for i, label in enumerate(HOSTILE_FILES)}
    for label, path in files.items():
        path.write_text(HOSTILE_FILES[label])
    files["a folder"] = tmp_path
    files["not UTF-8"] = tmp_path / "latin1.json"
    files["not UTF-8"].write_bytes(b'{"name": "\xe9"}')
    for label, path in files.items():
        for verb in (
            ["plan", "--plan-file", str(path)],
            ["recover", "1", "--plan", str(path), "--idempotency-key", "k"],
            ["route-preview", "router", "--messages-file", str(path)],
        ):
            r = bench(*verb)
            assert one_error_line(r), (label, verb[0], r)
            assert str(path) in r.err, (label, r.err)


def test_an_argument_that_is_not_valid_unicode_is_one_error_line(bench) -> None:  # type: ignore[no-untyped-def]
    # A byte that is not UTF-8 on the command line reaches Python as a lone surrogate.
    r = bench("plan", "--dataset", "1", "--target", "x", "--name", "bad \udcff name")
    assert one_error_line(r), r
