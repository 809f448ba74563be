"""Each adapter on its bundled official-format fixture, and on malformed input."""

from __future__ import annotations

import base64
import csv
import json
import os
import pickle
import shutil
import zlib
from fractions import Fraction
from pathlib import Path

import pytest

from datasets.benchmarks import ADAPTERS, LoaderError, get_adapter
from datasets.benchmarks.gpqa import shuffle_choices
from datasets.benchmarks.livecodebench import decode_private_tests

KEYS = [
    "mmlu-pro",
    "simpleqa",
    "gpqa",
    "hle",
    "arc",
    "livecodebench",
    "scicode",
    "terminal-bench",
    "tau3",
]


def test_registry_has_the_nine_benchmarks_in_spec_order_with_exact_weights() -> None:
    assert list(ADAPTERS) == KEYS
    assert sum(a.weight for a in ADAPTERS.values()) == 1
    assert ADAPTERS["gpqa"].weight == ADAPTERS["hle"].weight == Fraction(3, 20)
    for adapter in ADAPTERS.values():
        assert adapter.kind in {"mcq", "judge", "grid", "code", "agent"}
        assert adapter.grader_version and adapter.loader_version and adapter.licence_note


def test_unknown_benchmark_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known benchmarks: mmlu-pro"):
        get_adapter("mmlu")


@pytest.mark.parametrize("key", KEYS)
def test_fixture_loads_into_public_payload_and_secret(key: str) -> None:
    adapter = get_adapter(key)
    questions = adapter.load(adapter.fixture_path())
    assert 3 <= len(questions) <= 20
    assert len({q.native_id for q in questions}) == len(questions)
    for q in questions:
        assert q.benchmark == key and q.subject
        json.dumps(q.payload)
        json.dumps(q.secret)
        messages = adapter.messages(q.payload)
        assert messages and messages[-1]["role"] == "user" and messages[-1]["content"].strip()


@pytest.mark.parametrize("key", ["mmlu-pro", "gpqa"])
def test_mcq_secret_letter_names_an_option(key: str) -> None:
    adapter = get_adapter(key)
    for q in adapter.load(adapter.fixture_path()):
        letters = [chr(65 + i) for i in range(len(q.payload["options"]))]
        assert q.secret == {"answer": q.secret["answer"]} and q.secret["answer"] in letters


@pytest.mark.parametrize("key", ["simpleqa", "hle"])
def test_judge_reference_stays_out_of_the_payload(key: str) -> None:
    adapter = get_adapter(key)
    for q in adapter.load(adapter.fixture_path()):
        assert q.secret["answer"]
        assert "answer" not in q.payload and "rationale" not in q.payload


def test_hle_skips_and_counts_image_rows() -> None:
    adapter = get_adapter("hle")
    report = adapter.load_with_report(adapter.fixture_path())
    assert report.skipped == {"image": 1}
    assert "fixture-hle-0005" not in {q.native_id for q in report.questions}
    mc = next(q for q in report.questions if q.payload["answer_type"] == "multipleChoice")
    assert mc.secret["answer"] == "C"


def test_gpqa_shuffle_is_deterministic_per_question_and_tracks_the_correct_text(
    tmp_path: Path,
) -> None:
    adapter = get_adapter("gpqa")
    first = adapter.load(adapter.fixture_path())
    again = adapter.load(adapter.fixture_path())
    assert first == again
    rows = {
        r["Record ID"]: r
        for r in csv.DictReader(adapter.fixture_path().open(encoding="utf-8", newline=""))
    }
    for q in first:
        letter_index = ord(q.secret["answer"]) - 65
        assert q.payload["options"][letter_index] == rows[q.native_id]["Correct Answer"]
    orders = {tuple(shuffle_choices(f"rec-{i}", "right", ["w1", "w2", "w3"])[0]) for i in range(20)}
    assert len(orders) > 3  # different questions get different permutations
    letters = {shuffle_choices(f"rec-{i}", "right", ["w1", "w2", "w3"])[1] for i in range(20)}
    assert len(letters) > 1  # the correct answer is not always in the same place


def test_arc_payload_shows_test_inputs_and_hides_outputs() -> None:
    adapter = get_adapter("arc")
    for q in adapter.load(adapter.fixture_path()):
        assert set(q.payload) == {"train", "test_inputs"}
        assert len(q.secret["outputs"]) == len(q.payload["test_inputs"])


def test_livecodebench_private_tests_are_decoded_into_the_secret_only() -> None:
    adapter = get_adapter("livecodebench")
    by_id = {q.native_id: q for q in adapter.load(adapter.fixture_path())}
    functional = by_id["fixture-lcb-002"]
    assert functional.payload["func_name"] == "longestPlateau"
    assert len(functional.payload["public_tests"]) == 1
    assert len(functional.secret["tests"]) == 4  # public first, then the three private ones
    assert functional.secret["tests"][0] == functional.payload["public_tests"][0]
    assert "[4, 4, 4, 4]" not in json.dumps(functional.payload)
    assert len(by_id["fixture-lcb-003"].secret["tests"]) == 3  # plain-JSON private tests


class _RunsCommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_livecodebench_refuses_a_pickle_that_would_run_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = base64.b64encode(zlib.compress(pickle.dumps(_RunsCommand(marker)))).decode()
    with pytest.raises(ValueError, match="refusing to load global"):
        decode_private_tests(evil)
    assert not marker.exists()

    source = get_adapter("livecodebench").fixture_path().read_text().splitlines()
    row = json.loads(source[0]) | {"private_test_cases": evil}
    file = tmp_path / "test.jsonl"
    file.write_text(json.dumps(row) + "\n")
    with pytest.raises(LoaderError) as err:
        get_adapter("livecodebench").load(file)
    assert "row 1" in str(err.value) and "'private_test_cases'" in str(err.value)
    assert not marker.exists()


def test_livecodebench_refuses_a_pickled_non_string(tmp_path: Path) -> None:
    blob = base64.b64encode(zlib.compress(pickle.dumps([{"input": "1"}]))).decode()
    with pytest.raises(ValueError, match="expected a JSON string"):
        decode_private_tests(blob)


def test_scicode_hides_test_cases_and_records_target_keys() -> None:
    adapter = get_adapter("scicode")
    q = next(q for q in adapter.load(adapter.fixture_path()) if q.native_id == "901")
    assert all("test_cases" not in s for s in q.payload["sub_steps"])
    assert q.secret["steps"][1]["target_keys"] == ["901.2/test1", "901.2/test2"]
    assert "time_of_flight" in adapter.messages(q.payload)[-1]["content"]


def test_terminal_bench_reads_harbor_and_legacy_tasks_and_hides_tests() -> None:
    adapter = get_adapter("terminal-bench")
    by_id = {q.native_id: q for q in adapter.load(adapter.fixture_path())}
    assert by_id["count-error-lines"].payload["format"] == "harbor"
    assert by_id["csv-column-sum"].payload["format"] == "legacy"
    for q in by_id.values():
        public_paths = {f["path"] for f in q.payload["environment_files"]}
        secret_paths = {f["path"] for f in q.secret["tests"] + q.secret["solution"]}
        assert secret_paths and not public_paths & secret_paths
        assert not any(p.startswith(("tests/", "solution")) for p in public_paths)
    assert {f["path"] for f in by_id["csv-column-sum"].payload["environment_files"]} == {
        "Dockerfile",
        "sales.csv",
    }


def test_tau3_payload_has_the_domain_and_secret_has_the_criteria() -> None:
    adapter = get_adapter("tau3")
    q = adapter.load(adapter.fixture_path())[0]
    assert q.native_id == "library/renew_simple" and q.subject == "library"
    assert "evaluation_criteria" not in q.payload and "description" not in q.payload
    assert q.secret["evaluation_criteria"]["actions"][1]["name"] == "renew_loan"
    assert q.payload["db"]["loans"]["L-1"]["book_id"] == "B-310"
    messages = adapter.messages(q.payload)
    assert "lending-desk" in messages[0]["content"] and "Winter Recipes" in messages[1]["content"]


# ---------------------------------------------------------------------------------------------
# Malformed input: the error names file, row and field.


def assert_names(err: pytest.ExceptionInfo[LoaderError], file: str, row: str, field: str) -> None:
    message = str(err.value)
    assert file in message, message
    assert f"row {row}" in message, message
    assert f"field '{field}'" in message, message


def test_mmlu_pro_jsonl_bad_answer_letter(tmp_path: Path) -> None:
    good = {
        "question_id": 1,
        "question": "q",
        "options": ["a", "b", "c"],
        "answer": "B",
        "answer_index": 1,
        "cot_content": "",
        "category": "math",
        "src": "x",
    }
    file = tmp_path / "mmlu.jsonl"
    file.write_text(json.dumps(good) + "\n" + json.dumps(good | {"question_id": 2, "answer": "K"}))
    with pytest.raises(LoaderError) as err:
        get_adapter("mmlu-pro").load(file)
    assert_names(err, "mmlu.jsonl", "2", "answer")


def test_mmlu_pro_answer_index_disagreeing_with_letter(tmp_path: Path) -> None:
    row = {
        "question_id": 1,
        "question": "q",
        "options": ["a", "b"],
        "answer": "B",
        "answer_index": 0,
        "category": "math",
    }
    file = tmp_path / "m.jsonl"
    file.write_text(json.dumps(row) + "\n")
    with pytest.raises(LoaderError) as err:
        get_adapter("mmlu-pro").load(file)
    assert_names(err, "m.jsonl", "1", "answer_index")


def test_mmlu_pro_parquet_missing_column(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"question_id": [1]}), tmp_path / "data" / "test-0.parquet")
    with pytest.raises(LoaderError) as err:
        get_adapter("mmlu-pro").load(tmp_path)
    assert_names(err, "test-0.parquet", "schema", "question")


def test_simpleqa_metadata_that_is_not_a_literal(tmp_path: Path) -> None:
    file = tmp_path / "simple_qa_test_set.csv"
    with file.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["metadata", "problem", "answer"])
        writer.writerow(["{'topic': 'Art'}", "Who?", "Me"])
        writer.writerow(["{'topic': __import__('os')}", "Why?", "Because"])
    with pytest.raises(LoaderError) as err:
        get_adapter("simpleqa").load(file)
    assert_names(err, "simple_qa_test_set.csv", "2", "metadata")


def test_simpleqa_missing_column(tmp_path: Path) -> None:
    file = tmp_path / "s.csv"
    file.write_text("metadata,problem\n\"{'topic': 'Art'}\",Who?\n")
    with pytest.raises(LoaderError) as err:
        get_adapter("simpleqa").load(file)
    assert_names(err, "s.csv", "header", "answer")


def test_gpqa_empty_correct_answer(tmp_path: Path) -> None:
    source = get_adapter("gpqa").fixture_path()
    rows = list(csv.DictReader(source.open(encoding="utf-8", newline="")))
    rows[2]["Correct Answer"] = "  "
    file = tmp_path / "gpqa_diamond.csv"
    with file.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(LoaderError) as err:
        get_adapter("gpqa").load(tmp_path)
    assert_names(err, "gpqa_diamond.csv", "3", "Correct Answer")


def test_hle_unknown_answer_type(tmp_path: Path) -> None:
    row = {
        "id": "x1",
        "question": "q",
        "image": "",
        "answer": "a",
        "answer_type": "freeform",
        "category": "Math",
    }
    file = tmp_path / "hle.jsonl"
    file.write_text("\n" + json.dumps(row) + "\n")
    with pytest.raises(LoaderError) as err:
        get_adapter("hle").load(file)
    assert_names(err, "hle.jsonl", "2", "answer_type")


def test_arc_cell_out_of_range(tmp_path: Path) -> None:
    task = {
        "train": [{"input": [[1]], "output": [[1]]}],
        "test": [{"input": [[1]], "output": [[12]]}],
    }
    (tmp_path / "abc123.json").write_text(json.dumps(task))
    with pytest.raises(LoaderError) as err:
        get_adapter("arc").load(tmp_path)
    assert_names(err, "abc123.json", "abc123", "test[0].output")


def test_livecodebench_functional_tests_need_func_name(tmp_path: Path) -> None:
    source = get_adapter("livecodebench").fixture_path().read_text().splitlines()
    row = json.loads(source[1]) | {"metadata": "{}"}
    file = tmp_path / "test.jsonl"
    file.write_text(source[0] + "\n" + json.dumps(row) + "\n")
    with pytest.raises(LoaderError) as err:
        get_adapter("livecodebench").load(file)
    assert_names(err, "test.jsonl", "2", "metadata.func_name")


def test_livecodebench_private_tests_neither_json_nor_base64(tmp_path: Path) -> None:
    source = get_adapter("livecodebench").fixture_path().read_text().splitlines()
    row = json.loads(source[0]) | {"private_test_cases": "not%base64!"}
    file = tmp_path / "test.jsonl"
    file.write_text(json.dumps(row) + "\n")
    with pytest.raises(LoaderError) as err:
        get_adapter("livecodebench").load(file)
    assert_names(err, "test.jsonl", "1", "private_test_cases")


def test_scicode_test_cases_not_a_list(tmp_path: Path) -> None:
    lines = get_adapter("scicode").fixture_path().read_text().splitlines()
    problem = json.loads(lines[0])
    problem["sub_steps"][1]["test_cases"] = "assert True"
    file = tmp_path / "problems_all.jsonl"
    file.write_text(json.dumps(problem) + "\n")
    with pytest.raises(LoaderError) as err:
        get_adapter("scicode").load(tmp_path)
    assert_names(err, "problems_all.jsonl", "1", "sub_steps[1].test_cases")


def _copy_tasks(tmp_path: Path) -> Path:
    target = tmp_path / "tasks"
    shutil.copytree(get_adapter("terminal-bench").fixture_path(), target)
    return target


def test_terminal_bench_bad_timeout(tmp_path: Path) -> None:
    tasks = _copy_tasks(tmp_path)
    toml = tasks / "count-error-lines" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 300.0", "timeout_sec = -1"))
    with pytest.raises(LoaderError) as err:
        get_adapter("terminal-bench").load(tasks)
    assert_names(err, "count-error-lines/task.toml", "count-error-lines", "agent.timeout_sec")


def test_terminal_bench_missing_instruction(tmp_path: Path) -> None:
    tasks = _copy_tasks(tmp_path)
    (tasks / "fix-broken-script" / "instruction.md").unlink()
    with pytest.raises(
        LoaderError, match="fix-broken-script/instruction.md: row fix-broken-script"
    ):
        get_adapter("terminal-bench").load(tasks)


def test_tau3_task_without_evaluation_criteria(tmp_path: Path) -> None:
    domains = tmp_path / "domains"
    shutil.copytree(get_adapter("tau3").fixture_path(), domains)
    tasks_file = domains / "library" / "tasks.json"
    tasks = json.loads(tasks_file.read_text())
    del tasks[2]["evaluation_criteria"]
    tasks_file.write_text(json.dumps(tasks))
    with pytest.raises(LoaderError) as err:
        get_adapter("tau3").load(domains)
    assert_names(err, "library/tasks.json", "hold_limit", "evaluation_criteria")


def test_missing_path_is_a_loader_error(tmp_path: Path) -> None:
    for key in KEYS:
        with pytest.raises(LoaderError, match="not found"):
            get_adapter(key).load(tmp_path / "nowhere")
