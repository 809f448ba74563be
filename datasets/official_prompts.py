"""Official prompts, read from the installed packages that carry them (issue 37 item 3).

A plan may ask (`official_prompting`) for a benchmark's subject prompts to be the benchmark's
own instead of sr-bench's:

* SciCode — the package's `multistep_template.txt`, filled by its own `Gencode`
  (`scicode/gen/gencode_json.py`): one single-turn prompt per sub-step carrying the earlier
  steps' descriptions and the model's earlier code, as cut by its `extract_python_script`
  (`scicode/gen/models.py`); without step background (the upstream default).
* LiveCodeBench — the package's `format_prompt_generation` (`livecodebench/prompts/
  code_generation.py`, its `PromptConstants` and `get_generic_question_template_answer`) in the
  OpenAI chat style, the style of an OpenAI-compatible chat endpoint. Its official grader
  (`livecodebench/evaluation/testing_util.py`) runs in the sandbox (runs.engine.official_code).

No text of theirs is written here. The functions and constants are taken from the installed
package's source with `ast` and compiled from it; the modules are not imported, because they
import what this project does not install (Hugging Face `datasets`, whose top-level name is
our app's; litellm, openai). The plan freezes the package's name and version, the sha256 of
the template file and of every other file read; a file that changed since the plan is not
used. Without the package the plan is refused: a run asked to use official prompts is never
asked in ours under that name.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

PROMPTING_VERSION = "official-prompting/1"
LCB_STYLE = "OpenAIChat"
SCICODE_WITH_BACKGROUND = False


class PromptingUnavailable(Exception):
    """The official prompt cannot be built here; the message is the reason shown."""


@dataclass(frozen=True)
class _Source:
    distribution: str
    template: str  # the template file, relative to the install root
    # Further files read (functions compiled from them), relative to the install root.
    code: tuple[str, ...]
    # (file, names) whose top-level definitions are compiled, in order, into one namespace.
    definitions: tuple[tuple[str, tuple[str, ...]], ...]
    label: str


LCB_PROMPTS = "livecodebench/prompts/code_generation.py"
LCB_STYLES = "livecodebench/lm_styles.py"
LCB_EXTRACTION = "livecodebench/utils/extraction_utils.py"
LCB_TESTING_UTIL = "livecodebench/evaluation/testing_util.py"
SCICODE_TEMPLATE = "scicode/data/multistep_template.txt"
SCICODE_GENCODE = "scicode/gen/gencode_json.py"
SCICODE_MODELS = "scicode/gen/models.py"
SCICODE_PARSE = "scicode/parse/parse.py"
# The steps upstream never asks a model for: their code comes from these files of the package
# (gencode_json.py reads them); the one list of them (runs.engine.code_grading reads it too).
SCICODE_GOLD_FILES = {step: f"scicode/data/{step}.txt" for step in ("13.6", "62.1", "76.3")}

SOURCES: dict[str, _Source] = {
    "livecodebench": _Source(
        distribution="nvidia-livecodebench",
        template=LCB_PROMPTS,
        code=(LCB_STYLES, LCB_EXTRACTION, LCB_TESTING_UTIL),
        definitions=(
            (LCB_STYLES, ("LMStyle",)),
            (LCB_EXTRACTION, ("extract_code",)),
            (
                LCB_PROMPTS,
                (
                    "PromptConstants",
                    "get_generic_question_template_answer",
                    "format_prompt_generation",
                ),
            ),
        ),
        label="LiveCodeBench official prompt (format_prompt_generation, OpenAI chat style)",
    ),
    "scicode": _Source(
        distribution="nvidia-scicode",
        template=SCICODE_TEMPLATE,
        code=(SCICODE_GENCODE, SCICODE_MODELS, SCICODE_PARSE, *SCICODE_GOLD_FILES.values()),
        definitions=(
            (SCICODE_MODELS, ("extract_python_script",)),
            (SCICODE_PARSE, ("extract_function_name", "get_function_from_code")),
            (SCICODE_GENCODE, ("Gencode",)),
        ),
        label="SciCode official multistep prompt (multistep_template.txt, without background)",
    ),
}
OFFICIAL_PROMPTED = tuple(SOURCES)


@dataclass(frozen=True)
class OfficialPrompting:
    benchmark: str
    package: str
    version: str
    file: str
    sha256: str  # of the template file's bytes
    code_sha256: dict[str, str]  # every other file read: path -> sha256 of its bytes
    namespace: dict[str, Any] = field(repr=False, compare=False)
    root: Path = field(repr=False, compare=False)

    def manifest_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "available": True,
            "prompting": PROMPTING_VERSION,
            "label": SOURCES[self.benchmark].label,
            "package": self.package,
            "version": self.version,
            "file": self.file,
            "template_sha256": self.sha256,
            "code_sha256": dict(self.code_sha256),
        }
        if self.benchmark == "livecodebench":
            entry["style"] = LCB_STYLE
            entry["grader"] = {
                "file": LCB_TESTING_UTIL,
                "sha256": self.code_sha256[LCB_TESTING_UTIL],
            }
        else:
            entry["with_background"] = SCICODE_WITH_BACKGROUND
        return entry

    def function(self, name: str) -> Callable[..., Any]:
        function: Callable[..., Any] = self.namespace[name]
        return function

    def read(self, relpath: str) -> bytes:
        """A file the plan froze, re-checked against its frozen hash (a changed file is not
        the one the plan named)."""
        data = (self.root / relpath).read_bytes()
        want = self.sha256 if relpath == self.file else self.code_sha256.get(relpath)
        if hashlib.sha256(data).hexdigest() != want:
            raise PromptingUnavailable(f"{relpath} changed since it was read")
        return data


def _root(distribution: str) -> tuple[Path, str]:
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise PromptingUnavailable(
            f"the {distribution} package, which carries the official prompt, is not installed "
            "here (make install adds it)"
        ) from None
    return Path(str(dist.locate_file(""))).resolve(), dist.version


def _definitions(path: Path, names: tuple[str, ...]) -> list[ast.stmt]:
    tree = ast.parse(path.read_bytes(), filename=str(path))
    found = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names
    }
    missing = [n for n in names if n not in found]
    if missing:
        raise PromptingUnavailable(f"{', '.join(missing)} not found in {path.name}")
    return [found[n] for n in names]


def _quiet(*args: Any, **kwargs: Any) -> None:
    """The packages' helpers print on a reply without code; a worker's log is not their
    console."""


@lru_cache(maxsize=8)
def _compiled(root: str, benchmark: str, stamp: tuple[tuple[str, int, int], ...]) -> dict[str, Any]:
    """The package's definitions compiled into one namespace, with the few module-level names
    they use (standard modules; the anthropic prompt markers its import fallback sets to None;
    the `CodeGenerationProblem` annotation, which needs Hugging Face `datasets`)."""
    # Imported here: only a plan or a cell that asks for official prompts needs them.
    import dataclasses
    import datetime
    import enum
    import importlib.resources
    import re
    import typing

    namespace: dict[str, Any] = {
        "__name__": f"srbench_official_{benchmark}",
        "ast": ast,
        "re": re,
        "resources": importlib.resources,
        "Path": Path,
        "Optional": typing.Optional,
        "Enum": enum.Enum,
        "dataclass": dataclasses.dataclass,
        "datetime": datetime.datetime,
        "HUMAN_PROMPT": None,
        "AI_PROMPT": None,
        "CodeGenerationProblem": object,
        # Gencode's default template (the with-background one); always passed explicitly here.
        "DEFAULT_PROMPT_TEMPLATE": None,
        "print": _quiet,
    }
    for relpath, names in SOURCES[benchmark].definitions:
        path = Path(root) / relpath
        module = ast.Module(body=_definitions(path, names), type_ignores=[])
        exec(compile(module, str(path), "exec"), namespace)  # noqa: S102 - the package's own code
    return namespace


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_prompting(benchmark: str, *, root: Path | None = None) -> OfficialPrompting:
    """The official prompt builder of `benchmark`, from the installed package (or `root`, a
    copy of its install tree). Raises PromptingUnavailable with the reason."""
    source = SOURCES.get(benchmark)
    if source is None:
        raise PromptingUnavailable(f"{benchmark} has no official prompt here")
    if root is None:
        base, version = _root(source.distribution)
    else:
        base, version = root, _version(source.distribution)
    files = (source.template, *source.code)
    stamp = []
    for relpath in files:
        path = base / relpath
        if not path.is_file():
            raise PromptingUnavailable(f"{relpath} is not in the installed {source.distribution}")
        st = path.stat()
        stamp.append((relpath, st.st_mtime_ns, st.st_size))
    try:
        namespace = _compiled(str(base), benchmark, tuple(stamp))
    except (SyntaxError, NameError, AttributeError) as exc:
        raise PromptingUnavailable(f"the official prompt code does not load: {exc}") from exc
    return OfficialPrompting(
        benchmark=benchmark,
        package=source.distribution,
        version=version,
        file=source.template,
        sha256=_sha256(base / source.template),
        code_sha256={relpath: _sha256(base / relpath) for relpath in source.code},
        namespace=namespace,
        root=base,
    )


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def frozen_prompting(benchmark: str, frozen: dict[str, Any] | None) -> OfficialPrompting | None:
    """The builder a plan froze, or None when the plan did not ask for it. Raises
    PromptingUnavailable when the installed package is not the one frozen."""
    if not frozen:
        return None
    if not frozen.get("available"):
        raise PromptingUnavailable(frozen.get("reason") or "official prompting not available")
    prompting = load_prompting(benchmark)
    if (prompting.package, prompting.version) != (frozen.get("package"), frozen.get("version")):
        raise PromptingUnavailable(
            f"{prompting.package} {prompting.version} is installed; the plan froze "
            f"{frozen.get('package')} {frozen.get('version')}"
        )
    want = {frozen.get("file"): frozen.get("template_sha256"), **(frozen.get("code_sha256") or {})}
    have = {prompting.file: prompting.sha256, **prompting.code_sha256}
    changed = sorted(str(p) for p in set(want) | set(have) if want.get(p) != have.get(p))
    if changed:
        raise PromptingUnavailable(
            f"the installed {prompting.package} {prompting.version} is not the one the plan "
            f"froze: {', '.join(changed)} changed"
        )
    return prompting


# ---------------------------------------------------------------------------------------------
# LiveCodeBench


def lcb_messages(prompting: OfficialPrompting, payload: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages the package builds for one problem (system, then user)."""
    question = SimpleNamespace(
        question_content=payload["question_content"],
        starter_code=payload.get("starter_code") or "",
    )
    style = prompting.function("LMStyle")(LCB_STYLE)
    messages = prompting.function("format_prompt_generation")(question, style)
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages
    ):
        raise PromptingUnavailable("format_prompt_generation did not return chat messages")
    return [{"role": str(m["role"]), "content": m["content"]} for m in messages]


def lcb_extract_code(prompting: OfficialPrompting, reply: str | None) -> str:
    """The program the package's `extract_code` takes from a reply (its OpenAI chat style)."""
    style = prompting.function("LMStyle")(LCB_STYLE)
    return str(prompting.function("extract_code")(reply or "", style))


# ---------------------------------------------------------------------------------------------
# SciCode


def scicode_problem(payload: dict[str, Any]) -> dict[str, Any]:
    """The problem as the package's `Gencode` reads a problems_all.jsonl row."""
    return {
        "problem_id": payload["problem_id"],
        "required_dependencies": payload.get("required_dependencies") or "",
        "sub_steps": payload["sub_steps"],
    }


def scicode_step_prompt(
    prompting: OfficialPrompting,
    payload: dict[str, Any],
    step: int,
    previous_code: list[str],
) -> str:
    """The package's prompt for sub-step `step` (1-based), given the code of every earlier
    step (`previous_code[i]` for step i + 1)."""
    gencode = prompting.function("Gencode")(
        model="srbench",
        output_dir=Path("."),
        prompt_dir=Path("."),
        with_background=SCICODE_WITH_BACKGROUND,
    )
    total = len(payload["sub_steps"])
    gencode.previous_llm_code = [*previous_code[: step - 1]] + [None] * (total - step + 1)
    template = prompting.read(prompting.file).decode("utf-8")
    prompt, _ = gencode.generate_prompt_with_steps(scicode_problem(payload), step, template)
    return str(prompt)


def scicode_reply_code(prompting: OfficialPrompting, reply: str | None) -> str:
    """What the package keeps of a step's reply for the next steps' prompts."""
    return str(prompting.function("extract_python_script")(reply or ""))


def scicode_gold_code(prompting: OfficialPrompting, step_number: str, header: str) -> str | None:
    """The code the package carries for a step upstream does not ask for, as `Gencode` reads it
    into the next steps' prompts; None for every other step."""
    relpath = SCICODE_GOLD_FILES.get(step_number)
    if relpath is None:
        return None
    name = prompting.function("extract_function_name")(header)
    text = prompting.read(relpath).decode("utf-8")
    code = prompting.function("get_function_from_code")(text, name)
    return None if code is None else str(code)


def scicode_gold_source(prompting: OfficialPrompting, step_number: str) -> str | None:
    """The whole gold file of such a step (what upstream's tests run as that step's code)."""
    relpath = SCICODE_GOLD_FILES.get(step_number)
    return None if relpath is None else prompting.read(relpath).decode("utf-8")


# ---------------------------------------------------------------------------------------------
# LiveCodeBench's official grader, summarised (pure)

LCB_OFFICIAL_LABEL = "LiveCodeBench official grader (testing_util.run_test, pass@1)"


def lcb_official_summary(outcomes: list[bool | None]) -> dict[str, Any]:
    """One entry per question: whether the official grader passed its first attempt, or None
    (no official outcome: cut off, failed, not graded). pass@1 over the graded questions, as
    upstream divides by graded samples; the others are counted beside them."""
    from srbench.stats import wilson_interval

    graded = [o for o in outcomes if o is not None]
    n, passed = len(graded), sum(1 for o in graded if o)
    out: dict[str, Any] = {
        "label": LCB_OFFICIAL_LABEL,
        "questions": len(outcomes),
        "graded": n,
        "without_outcome": len(outcomes) - n,
        "passed": passed,
    }
    if n == 0:
        return {**out, "value": None, "reason": "no question has an official outcome"}
    interval = wilson_interval(passed, n)
    return {
        **out,
        "value": passed / n,
        "pass_at_1": passed / n,
        "pass_at_1_wilson_95": None if interval is None else list(interval),
    }
