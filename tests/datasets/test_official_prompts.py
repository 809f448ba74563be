"""Official prompts (issue 37 item 3): what sr-bench sends under `official_prompting` is the
package's own rendering, byte for byte — computed here from the package itself, imported the
way its own runner imports it — and the frozen hash follows the package's files."""

from __future__ import annotations

import json
import shutil
import sys
import types
from collections.abc import Iterator
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import pytest

from datasets import official_prompts as op
from datasets.benchmarks import get_adapter

LCB_FIXTURE = get_adapter("livecodebench").fixture_path()


@pytest.fixture
def lcb_package(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The package's own `livecodebench.prompts.code_generation`, imported as its runner does.
    It imports Hugging Face `datasets` for its data loader, which this project does not install
    (our app has that name): a stand-in with those names is there while it imports."""
    stand_in = types.ModuleType("datasets")
    stand_in.load_dataset = stand_in.Dataset = None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", stand_in)
    # Its prompts package imports the anthropic SDK's prompt markers in a sibling module (the
    # chat style compared here uses neither); code_generation.py sets them to None without it.
    anthropic = types.ModuleType("anthropic")
    anthropic.HUMAN_PROMPT = anthropic.AI_PROMPT = None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "anthropic", anthropic)
    before = set(sys.modules)
    try:
        from livecodebench.lm_styles import LMStyle
        from livecodebench.prompts import code_generation

        yield types.SimpleNamespace(module=code_generation, LMStyle=LMStyle)
    finally:
        for name in set(sys.modules) - before:
            if name.startswith("livecodebench"):
                del sys.modules[name]


def _lcb_rows() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in LCB_FIXTURE.read_text().splitlines() if line.strip()]
    assert any(r["starter_code"] for r in rows) and any(not r["starter_code"] for r in rows)
    return rows


def test_livecodebench_official_prompt_is_the_packages_rendering_byte_for_byte(lcb_package):
    prompting = op.load_prompting("livecodebench")
    adapter = get_adapter("livecodebench")
    questions = {q.native_id: q for q in adapter.load(LCB_FIXTURE)}
    fields = lcb_package.module.CodeGenerationProblem.__dataclass_fields__
    for row in _lcb_rows():
        problem = lcb_package.module.CodeGenerationProblem(**{k: row[k] for k in fields})
        want = lcb_package.module.format_prompt_generation(problem, lcb_package.LMStyle.OpenAIChat)
        got = op.lcb_messages(prompting, questions[row["question_id"]].payload)
        assert got == want
        assert [m["content"].encode() for m in got] == [m["content"].encode() for m in want]
        # Not sr-bench's own prompt.
        assert got != adapter.messages(questions[row["question_id"]].payload)


def test_livecodebench_code_is_extracted_by_the_packages_rule(lcb_package):
    from livecodebench.utils.extraction_utils import extract_code

    prompting = op.load_prompting("livecodebench")
    style = lcb_package.LMStyle.OpenAIChat
    for reply in (
        "text\n```python\nprint(1)\n```\nmore\n```python\nprint(2)\n```",
        "no fence at all",
        "```\nx = 1\n```",
        "",
    ):
        assert op.lcb_extract_code(prompting, reply) == extract_code(reply, style)


def _scicode_rows(limit: int) -> list[dict[str, Any]]:
    dist = metadata.distribution("nvidia-scicode")
    path = Path(str(dist.locate_file("scicode/data/problems_all.jsonl")))
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:limit] + [r for r in rows if str(r["problem_id"]) == "13"]


@pytest.fixture
def scicode_gencode(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The package's own `Gencode`, imported from scicode.gen.gencode_json. Its model module
    imports vendor SDKs this project does not install; `Gencode`'s prompt methods use none of
    it, so a stand-in with the two names it imports is there while it imports (and one for
    sympy, which its parse module imports at the top)."""
    models = types.ModuleType("scicode.gen.models")
    models.extract_python_script = None  # type: ignore[attr-defined]
    models.get_model_function = None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "scicode.gen.models", models)
    # scicode.parse.parse imports sympy for helpers of its own; not installed here (--no-deps).
    sympy = types.ModuleType("sympy")
    sympy.Symbol = None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sympy", sys.modules.get("sympy") or sympy)
    before = set(sys.modules)
    try:
        from scicode.gen.gencode_json import Gencode
        from scicode.parse.parse import extract_function_name, get_function_from_code

        yield types.SimpleNamespace(
            Gencode=Gencode, name=extract_function_name, function=get_function_from_code
        )
    finally:
        for name in set(sys.modules) - before:
            if name.startswith("scicode"):
                del sys.modules[name]


def test_scicode_official_prompt_is_the_packages_rendering_byte_for_byte(scicode_gencode):
    """Every step of real SciCode problems (the package's own problems_all.jsonl, read through
    our adapter for our side and as the raw row for the package's side), with earlier steps'
    code in the prompt, and problem 13 whose step 6 the package fills from its own file."""
    prompting = op.load_prompting("scicode")
    adapter = get_adapter("scicode")
    template = resources.files("scicode.data").joinpath("multistep_template.txt").read_text()
    checked = 0
    for row in _scicode_rows(4):
        payload = adapter._question(row, file=Path("problems_all.jsonl"), rownum=1).payload
        gencode = scicode_gencode.Gencode(
            model="m", output_dir=Path("."), prompt_dir=Path("."), with_background=False
        )
        steps = row["sub_steps"]
        gencode.previous_llm_code = [None] * len(steps)
        ours: list[str] = []
        for k, step in enumerate(steps, start=1):
            number = f"{row['problem_id']}.{k}"
            gold = op.scicode_gold_code(prompting, step["step_number"], step["function_header"])
            if number in op.SCICODE_GOLD_FILES:
                text = resources.files("scicode.data").joinpath(f"{number}.txt").read_text()
                code = scicode_gencode.function(text, scicode_gencode.name(step["function_header"]))
                assert gold == code
                gencode.previous_llm_code[k - 1] = code
                ours.append(code)
                continue
            assert gold is None
            want, _ = gencode.generate_prompt_with_steps(row, k, template)
            got = op.scicode_step_prompt(prompting, payload, k, ours)
            assert got.encode() == want.encode()
            checked += 1
            code = f"def step_{k}(x):\n    return x + {k}\n"
            gencode.previous_llm_code[k - 1] = code
            ours.append(code)
    assert checked >= 10


def test_scicode_keeps_of_a_reply_what_the_package_keeps():
    """`extract_python_script`: the first ```python block, import lines blanked."""
    prompting = op.load_prompting("scicode")
    reply = "Sure.\n```python\nimport numpy as np\ndef f(x):\n    return np.sum(x)\n```\nDone."
    assert op.scicode_reply_code(prompting, reply) == "\ndef f(x):\n    return np.sum(x)\n"


def _copy_package(benchmark: str, tmp_path: Path) -> Path:
    prompting = op.load_prompting(benchmark)
    source = op.SOURCES[benchmark]
    for relpath in (source.template, *source.code):
        (tmp_path / relpath).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(prompting.root / relpath, tmp_path / relpath)
    return tmp_path


@pytest.mark.parametrize("benchmark", op.OFFICIAL_PROMPTED)
def test_the_frozen_hash_changes_when_the_template_changes(benchmark, tmp_path):
    installed = op.load_prompting(benchmark)
    root = _copy_package(benchmark, tmp_path)
    same = op.load_prompting(benchmark, root=root)
    assert same.sha256 == installed.sha256 and same.code_sha256 == installed.code_sha256
    template = root / installed.file
    template.write_text(template.read_text().replace("Python", "Pyth0n", 1))
    changed = op.load_prompting(benchmark, root=root)
    assert changed.sha256 != installed.sha256
    entry = installed.manifest_entry()
    assert entry["template_sha256"] == installed.sha256
    assert entry["package"] == op.SOURCES[benchmark].distribution
    assert entry["version"] == metadata.version(entry["package"])
    # The run's check refuses a package whose template is not the one frozen.
    with pytest.raises(op.PromptingUnavailable, match="changed"):
        op.frozen_prompting(benchmark, entry | {"template_sha256": changed.sha256})
    assert op.frozen_prompting(benchmark, entry) is not None


def test_the_prompt_is_read_from_the_package_at_run_time(tmp_path):
    """Change the package's system message in a copy of its tree: the rendered prompt follows
    (no copy of the text lives in this repository)."""
    root = _copy_package("livecodebench", tmp_path)
    prompts = root / op.LCB_PROMPTS
    text = prompts.read_text()
    assert "You are an expert Python programmer." in text
    prompts.write_text(text.replace("You are an expert Python programmer.", "Edited here."))
    payload = {"question_content": "Q", "starter_code": ""}
    edited = op.lcb_messages(op.load_prompting("livecodebench", root=root), payload)
    installed = op.lcb_messages(op.load_prompting("livecodebench"), payload)
    assert edited[0]["content"].startswith("Edited here.")
    assert installed[0]["content"].startswith("You are an expert Python programmer.")
    repo = Path(__file__).resolve().parents[2]
    for path in [*repo.glob("datasets/**/*.py"), *repo.glob("runs/**/*.py")]:
        assert "FORMATTING_WITHOUT_STARTER_CODE =" not in path.read_text(), path


def test_official_pass_at_1_summary():
    s = op.lcb_official_summary([True, False, None, True])
    assert (s["graded"], s["passed"], s["without_outcome"]) == (3, 2, 1)
    assert s["pass_at_1"] == pytest.approx(2 / 3)
    lo, hi = s["pass_at_1_wilson_95"]
    assert lo < 2 / 3 < hi
    assert op.lcb_official_summary([None])["value"] is None
