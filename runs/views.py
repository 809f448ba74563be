from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from runs.models import Run, Target


def run_list(request: HttpRequest) -> HttpResponse:
    runs = Run.objects.select_related("owner").order_by("-created_at", "-id")
    page = Paginator(runs, 25).get_page(request.GET.get("page"))
    return render(request, "runs/run_list.html", {"page": page, "nav": "runs"})


def target_list(request: HttpRequest) -> HttpResponse:
    return render(
        request, "runs/target_list.html", {"targets": Target.objects.all(), "nav": "targets"}
    )
