"""Datasets pages (SPEC R9): list, dataset, question. Plain GET forms keep every filter and
page in the URL, so the pages work without JavaScript and can be bookmarked.

Templates receive public payloads only; nothing here reads `QuestionSecret` (R9.3).
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from datasets.benchmarks import ADAPTERS
from datasets.benchmarks.base import option_letters
from datasets.models import FrozenDataset, Profile, Question
from datasets.selectors import (
    PROFILE_TOTAL_LABEL,
    TRAINING_EXPOSURE_WARNING,
    dataset_coverage,
    dataset_list,
    dataset_question_get,
    dataset_questions,
    dataset_sources,
    dataset_subject_groups,
    profile_totals,
)

PAGE_SIZE = 25
BENCHMARK_CHOICES = [("", "All benchmarks"), *((key, key) for key in ADAPTERS)]


class DatasetFilterForm(forms.Form):
    q = forms.CharField(required=False, label="Search", max_length=200)
    profile = forms.ChoiceField(required=False, choices=[("", "All profiles"), *Profile.choices])
    benchmark = forms.ChoiceField(required=False, choices=BENCHMARK_CHOICES)


class QuestionFilterForm(forms.Form):
    benchmark = forms.ChoiceField(required=False)
    subject = forms.ChoiceField(required=False)
    q = forms.CharField(required=False, label="Search", max_length=200)

    def __init__(self, *args: Any, benchmarks: list[str], subjects: list[str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["benchmark"].choices = [("", "All benchmarks"), *((b, b) for b in benchmarks)]
        self.fields["subject"].choices = [("", "All subjects"), *((s, s) for s in subjects)]


def _cleaned(form: forms.Form) -> dict[str, Any]:
    # An invalid value (a stale bookmark) filters nothing rather than erroring the page.
    if form.is_valid():
        return {k: v or None for k, v in form.cleaned_data.items()}
    return {name: None for name in form.fields}


@require_GET
def dataset_list_page(request: HttpRequest) -> HttpResponse:
    form = DatasetFilterForm(request.GET)
    filters = _cleaned(form)
    datasets = dataset_list(
        search=filters["q"], profile=filters["profile"], benchmark=filters["benchmark"]
    ).prefetch_related("sources")
    page = Paginator(datasets, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "datasets/dataset_list.html",
        {
            "nav": "datasets",
            "form": form,
            "page": page,
            "totals": profile_totals(),
            "totals_label": PROFILE_TOTAL_LABEL,
        },
    )


@require_GET
def dataset_detail_page(request: HttpRequest, pk: int) -> HttpResponse:
    dataset = get_object_or_404(dataset_list(), pk=pk)
    groups = dataset_subject_groups(dataset=dataset)
    coverage = dataset_coverage(dataset=dataset)
    form = QuestionFilterForm(
        request.GET,
        benchmarks=[c["benchmark"] for c in coverage],
        subjects=sorted({g["subject"] for g in groups if g["subject"]}),
    )
    filters = _cleaned(form)
    questions = dataset_questions(
        dataset=dataset,
        benchmark=filters["benchmark"],
        subject=filters["subject"],
        text=filters["q"],
    ).only("id", "benchmark", "native_id", "subject", "payload")
    page = Paginator(questions, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [{"question": q, "summary": _summary(q)} for q in page.object_list]
    return render(
        request,
        "datasets/dataset_detail.html",
        {
            "nav": "datasets",
            "dataset": dataset,
            "coverage": coverage,
            "subject_groups": groups,
            "sources": dataset_sources(dataset=dataset),
            "form": form,
            "page": page,
            "rows": rows,
            "warning": TRAINING_EXPOSURE_WARNING,
        },
    )


@require_GET
def question_detail_page(request: HttpRequest, pk: int, question_id: int) -> HttpResponse:
    dataset = get_object_or_404(FrozenDataset, pk=pk)
    question = dataset_question_get(dataset=dataset, question_id=question_id)
    if question is None:
        raise Http404("question not in this dataset")
    adapter = ADAPTERS[question.benchmark]
    return render(
        request,
        "datasets/question_detail.html",
        {
            "nav": "datasets",
            "dataset": dataset,
            "question": question,
            "kind": adapter.kind,
            "title": adapter.title,
            "task": _task(question),
            # Not `messages`: that name is Django's flash messages in every template (base.html).
            "prompt_messages": adapter.messages(question.payload),
            "payload_json": json.dumps(question.payload, indent=2, ensure_ascii=False),
            # Code and agent tasks are mostly their input files; show them open (R9.2).
            "input_open": adapter.kind in ("code", "agent"),
            "warning": TRAINING_EXPOSURE_WARNING,
        },
    )


# Keys, in preference order, under which each official format keeps the task text.
TEXT_KEYS = ("question", "question_content", "problem_description_main", "instruction", "ticket")
TITLE_KEYS = ("question_title", "problem_name", "task_id")


def _summary(question: Question, limit: int = 160) -> str:
    text = _task(question)["text"] or ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _task(question: Question) -> dict[str, Any]:
    """The headline parts of a public payload: title, text, lettered options, ARC grids."""
    payload = question.payload
    text = next((payload[k] for k in TEXT_KEYS if isinstance(payload.get(k), str)), None)
    if text is None and question.benchmark == "arc":
        text = f"{len(payload.get('train', []))} training pairs, " + (
            f"{len(payload.get('test_inputs', []))} test input(s)"
        )
    title = next((payload[k] for k in TITLE_KEYS if isinstance(payload.get(k), str)), None)
    options = payload.get("options")
    lettered = (
        list(zip(option_letters(len(options)), options, strict=True))
        if isinstance(options, list)
        else []
    )
    files = payload.get("environment_files")
    return {
        "title": title,
        # Agent tasks start from files in their working directory: show them as files.
        "files": files if isinstance(files, list) else [],
        # SciCode is multi-turn: later steps are not in the first prompt, so list them all.
        "steps": steps if isinstance(steps := payload.get("sub_steps"), list) else [],
        "text": text,
        "options": lettered,
        "train": payload.get("train") if question.benchmark == "arc" else None,
        "test_inputs": payload.get("test_inputs") if question.benchmark == "arc" else None,
    }
