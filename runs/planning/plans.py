"""Plans and their frozen manifests (R8.5–R8.8, DESIGN §4).

A plan names a frozen dataset, targets, whitelisted sampling, limits, judges and a failure
policy. Freezing resolves every reference into a canonical manifest — prices, case hashes,
weights, grader versions — whose sha256 is the plan's identity. Freezing never calls a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rest_framework import serializers

from datasets.benchmarks import ADAPTERS
from datasets.models import DatasetQuestion, FrozenDataset, Question
from datasets.official import OFFICIAL_JUDGED
from datasets.official import manifest_entry as official_manifest_entry
from datasets.official_prompts import OFFICIAL_PROMPTED, PromptingUnavailable, load_prompting
from runs.engine.runnable_here import CHECKED
from runs.engine.tau_episode import DEFAULT_TAU_MAX_TURNS
from runs.models import Run, Target, WireApi, validate_price_table
from runs.planning import runnable
from runs.planning.fixed_params import fixed_params_errors
from runs.preflight.plan import not_fitting, stream_usage_snapshot
from runs.vocabulary.limits import MAX_RUN_SECONDS
from runs.vocabulary.run_modes import RunMode
from srbench.api import StrictFieldsSerializer
from srbench.canonical import sha256_hex
from srbench.refusals import Refusal

MANIFEST_VERSION = 1
# Generation fields a plan may set; anything else (tools, response_format, logit_bias, …) would
# change what is being measured and is refused rather than passed through.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "reasoning_effort",
    "stop",
)
# Benchmark kinds the engine can run (all of them; kept as a guard for new adapters).
# Benchmarks whose user is played by a simulator target (role `simulator`).
USER_SIMULATED = ("tau3",)
SUPPORTED_KINDS = ("mcq", "judge", "grid", "code", "agent")


class PlanError(Refusal):
    """The plan is not valid; ``errors`` says why, field by field (the refusal's detail)."""

    http_status = 400
    code = "invalid_plan"

    def __init__(self, errors: dict[str, Any]) -> None:
        self.errors = errors
        super().__init__("The plan is not valid.", detail=errors)

    def __str__(self) -> str:
        return str(self.errors)


class SamplingSerializer(serializers.Serializer):
    temperature = serializers.FloatField(required=False, min_value=0, max_value=2)
    top_p = serializers.FloatField(required=False, min_value=0, max_value=1)
    # Bounded as the servers take them (a 32-bit top-k, a 64-bit seed): a value past them is
    # refused at plan review, not by every call of the run.
    top_k = serializers.IntegerField(required=False, min_value=1, max_value=2**31 - 1)
    seed = serializers.IntegerField(required=False, min_value=-(2**63), max_value=2**63 - 1)
    presence_penalty = serializers.FloatField(required=False, min_value=-2, max_value=2)
    frequency_penalty = serializers.FloatField(required=False, min_value=-2, max_value=2)
    reasoning_effort = serializers.ChoiceField(
        required=False, choices=["minimal", "low", "medium", "high"]
    )
    stop = serializers.ListField(
        required=False, child=serializers.CharField(max_length=64), max_length=4
    )

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(SAMPLING_FIELDS))
            if unknown:
                raise serializers.ValidationError(
                    {k: "not an allowed generation field" for k in unknown}
                )
        return super().to_internal_value(data)


class LimitsSerializer(StrictFieldsSerializer):
    concurrency = serializers.IntegerField(default=8, min_value=1, max_value=4096)
    total_timeout_s = serializers.FloatField(default=300, min_value=1)
    idle_timeout_s = serializers.FloatField(default=60, min_value=0.5)
    case_timeout_s = serializers.FloatField(default=900, min_value=1)
    max_run_seconds = serializers.FloatField(default=86400, min_value=1, max_value=MAX_RUN_SECONDS)
    max_output_tokens = serializers.IntegerField(default=4096, min_value=1, max_value=1_000_000)
    max_output_chars = serializers.IntegerField(default=200_000, min_value=1)
    # Multi-turn tasks (SciCode steps, agent loops) make many calls per case.
    max_calls_per_case = serializers.IntegerField(default=40, min_value=1, max_value=1000)
    max_cost_usd = serializers.DecimalField(
        max_digits=14, decimal_places=6, min_value=0, required=False, allow_null=True, default=None
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["idle_timeout_s"] > attrs["total_timeout_s"]:
            raise serializers.ValidationError(
                {"idle_timeout_s": "must be ≤ total_timeout_s (idle ≤ total ≤ run)"}
            )
        if attrs["total_timeout_s"] > attrs["max_run_seconds"]:
            raise serializers.ValidationError(
                {"total_timeout_s": "must be ≤ max_run_seconds (idle ≤ total ≤ run)"}
            )
        if not attrs["total_timeout_s"] <= attrs["case_timeout_s"] <= attrs["max_run_seconds"]:
            raise serializers.ValidationError(
                {"case_timeout_s": "must lie between total_timeout_s and max_run_seconds"}
            )
        return attrs


class MarginField(serializers.DecimalField):
    """A non-inferiority margin (R5.5) on the weighted quality difference: a decimal strictly
    between 0 and 1 with at most 4 places. Decimal, not float, so that 0.3 and "0.30" freeze
    to the same manifest text and hash, and 0.30000000000000004 is refused, never rounded."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_digits=5, decimal_places=4, **kwargs)

    def to_internal_value(self, data: Any) -> Decimal:
        value = super().to_internal_value(data)
        if not 0 < value < 1:
            raise serializers.ValidationError(
                "a non-inferiority margin lies strictly between 0 and 1"
            )
        return value


def margin_text(value: Decimal) -> str:
    """The canonical manifest text of a margin: "0.3", never "0.3000" or "3E-1"."""
    return format(value.normalize(), "f")


class PlanSerializer(StrictFieldsSerializer):
    name = serializers.CharField(max_length=200)
    dataset = serializers.IntegerField(min_value=1)
    targets = serializers.ListField(
        child=serializers.CharField(max_length=64), min_length=1, max_length=64
    )
    benchmarks = serializers.ListField(
        child=serializers.ChoiceField(choices=list(ADAPTERS)), required=False, allow_empty=False
    )
    sampling = SamplingSerializer(required=False, default=dict)
    limits = LimitsSerializer(required=False, default=dict)
    judges = serializers.DictField(
        child=serializers.CharField(max_length=64), required=False, default=dict
    )
    # Who plays the user in agent benchmarks that need one (τ³): a single-model target.
    simulators = serializers.DictField(
        child=serializers.CharField(max_length=64), required=False, default=dict
    )
    failure_policy = serializers.ChoiceField(choices=["stop", "continue"], default="stop")
    # preview: every case goes to the MoM target's routing preview instead of being answered
    # (no model call); the report gives the routing distribution, never accuracy or cost.
    mode = serializers.ChoiceField(choices=[str(m) for m in RunMode], default=RunMode.LIVE.value)
    preview_context = serializers.DictField(required=False, default=dict)
    slots = serializers.IntegerField(default=1, min_value=1, max_value=16)
    # Judged benchmarks also scored by their official judge template (issue 22 point 5), read
    # from the installed package with its hash frozen here; one more judge call per case.
    official_scoring = serializers.ListField(
        child=serializers.ChoiceField(choices=list(OFFICIAL_JUDGED)), required=False, default=list
    )
    # Benchmarks asked in their official prompts (issue 37 item 3), read from the installed
    # package with its name, version and file hashes frozen here (datasets.official_prompts).
    official_prompting = serializers.ListField(
        child=serializers.ChoiceField(choices=list(OFFICIAL_PROMPTED)), required=False, default=list
    )
    # Fixed before the run (R5.5): a parity verdict is judged only against this frozen value.
    non_inferiority_margin = MarginField(required=False, allow_null=True, default=None)
    # τ episodes: the agent-turn limit, frozen in each τ benchmark's manifest entry (issue 37
    # item 2); the default is the official τ² limit (runs/engine/tau_episode.py).
    tau_max_turns = serializers.IntegerField(
        default=DEFAULT_TAU_MAX_TURNS, min_value=1, max_value=1000
    )

    def validate_targets(self, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise serializers.ValidationError("a target is listed twice")
        return value

    def validate_limits(self, value: dict[str, Any]) -> dict[str, Any]:
        if not value:  # `default=dict` skips the nested defaults
            nested = LimitsSerializer(data={})
            nested.is_valid(raise_exception=True)
            return dict(nested.validated_data)
        return value


@dataclass(frozen=True)
class FrozenPlan:
    manifest: dict[str, Any]
    plan_sha256: str
    dataset: FrozenDataset
    targets: list[Target]


def _target_snapshot(target: Target) -> dict[str, Any]:
    snapshot: dict[str, Any] = {
        "slug": target.slug,
        "kind": target.kind,
        "base_url": target.base_url,
        "model": target.model,
        "fixed_params": target.fixed_params,
        "config_hash": target.config_hash or None,
        "max_inference_calls": target.max_inference_calls,
        "preview_url": target.preview_url or None,
        # Frozen so that a later change of the registry cannot change which of this run's
        # failures recovery treats as known to have cost nothing.
        "errors_billed": target.errors_billed,
    }
    # Named only when not the chat API, so every earlier plan keeps its snapshot and hash.
    if target.api != WireApi.OPENAI:
        snapshot["api"] = target.api
    # What the target check found of its stream usage, frozen (named only when a check looked
    # at it): a gateway's estimate the engine then records as unknown, or which check found
    # none. A later check cannot change what this plan's run decided.
    snapshot.update(stream_usage_snapshot(target))
    return snapshot


def _not_runnable_here(entries: list[tuple[int, str, str]], chosen: list[str]) -> dict[int, str]:
    ids = [qid for qid, _, b in entries if b in chosen and b in CHECKED]
    if not ids:
        return {}
    rows = Question.objects.filter(pk__in=ids).values_list(
        "pk", "benchmark", "payload", "secret__data"
    )
    return runnable.not_runnable(rows)


def _not_run_summary(
    entries: list[tuple[int, str, str]], excluded: dict[int, str]
) -> list[dict[str, Any]]:
    """The manifest's `not_run`: per benchmark and reason, how many questions were left out."""
    counts: dict[tuple[str, str], int] = {}
    for qid, _, benchmark in entries:
        if qid in excluded:
            key = (benchmark, excluded[qid])
            counts[key] = counts.get(key, 0) + 1
    return [{"benchmark": b, "reason": r, "questions": n} for (b, r), n in sorted(counts.items())]


def plan_field_errors(data: dict[str, Any]) -> dict[str, Any]:
    """The plan's own field rules (`PlanSerializer`: ranges, the margin, limits against each
    other) on a plan document, reading no row: empty when they hold. They are what
    `plan_freeze` refuses first; the Create page checks them beside its form's own errors, so
    every field error is said at once."""
    serializer = PlanSerializer(data=data)
    errors = {} if serializer.is_valid() else dict(serializer.errors)
    chosen = data.get("benchmarks") if data.get("mode") != Run.Mode.PREVIEW else None
    if isinstance(chosen, list):
        judges, simulators = data.get("judges") or {}, data.get("simulators") or {}
        for benchmark in (b for b in chosen if b in ADAPTERS):
            needs_judge, needs_simulator = _graders_needed(judges, benchmark)
            if needs_judge and not judges.get(benchmark):
                errors.setdefault("judges", {})[benchmark] = JUDGE_REQUIRED
            if needs_simulator and not simulators.get(benchmark):
                errors.setdefault("simulators", {})[benchmark] = SIMULATOR_REQUIRED
    return errors


def plan_freeze(*, data: dict[str, Any]) -> FrozenPlan:
    """Validate a plan and resolve it into a canonical manifest. Reads only; no model call."""
    serializer = PlanSerializer(data=data)
    if not serializer.is_valid():
        raise PlanError(serializer.errors)
    plan = serializer.validated_data
    errors: dict[str, Any] = {}

    dataset = FrozenDataset.objects.filter(pk=plan["dataset"]).first()
    if dataset is None:
        raise PlanError({"dataset": f"frozen dataset {plan['dataset']} does not exist"})

    targets = {t.slug: t for t in Target.objects.filter(slug__in=plan["targets"], active=True)}
    missing = [s for s in plan["targets"] if s not in targets]
    if missing:
        errors["targets"] = f"unknown or inactive target(s): {', '.join(missing)}"

    entries = list(
        DatasetQuestion.objects.filter(dataset=dataset)
        .order_by("position")
        .values_list("question_id", "question__content_sha256", "question__benchmark")
    )
    present = sorted({b for _, _, b in entries}, key=list(ADAPTERS).index)
    chosen = plan.get("benchmarks") or present
    not_in_dataset = [b for b in chosen if b not in present]
    if not_in_dataset:
        errors["benchmarks"] = f"not in the dataset: {', '.join(not_in_dataset)}"
    preview = plan["mode"] == Run.Mode.PREVIEW
    _check_mode(plan, targets, chosen, preview, errors)
    judges, simulators, judge_targets = _graders_resolve(plan, [] if preview else chosen, errors)
    _check_options(plan, chosen, preview, errors)
    for target in [*targets.values(), *judge_targets.values()]:  # stored before the rule
        if problems := fixed_params_errors(target.fixed_params):
            errors.setdefault("fixed_params", {})[target.slug] = problems
        if problems := validate_price_table(target.prices):  # exact money: issue 35 item 5
            errors.setdefault("prices", {})[target.slug] = problems
    if errors:
        raise PlanError(errors)

    # Questions that cannot run on this server are left out before any model call, each with
    # its reason (runs.engine.runnable_here): "not run" is never a wrong answer or a failed cell.
    excluded = {} if preview else _not_runnable_here(entries, chosen)
    if not preview:  # longer than a target's context its preflight showed (issue 39)
        excluded = {**not_fitting(entries, chosen, targets.values()), **excluded}
    cases = [[qid, sha, b] for qid, sha, b in entries if b in chosen and qid not in excluded]
    not_run = _not_run_summary(entries, excluded)
    if not cases:
        reasons = "; ".join(f"{e['questions']} × {e['reason']}" for e in not_run)
        raise PlanError(
            {
                "benchmarks": "the selection has no question that can run here"
                + (f": {reasons}" if reasons else "")
            }
        )
    chosen = [b for b in chosen if any(c[2] == b for c in cases)]
    ordered_targets = [targets[s] for s in plan["targets"]]
    manifest = _manifest_build(
        plan=plan,
        dataset=dataset,
        chosen=chosen,
        cases=cases,
        ordered_targets=ordered_targets,
        judges={b: j for b, j in judges.items() if b in chosen},
        simulators={b: u for b, u in simulators.items() if b in chosen},
        priced_targets=[*ordered_targets, *judge_targets.values()],
        not_run=not_run,
    )
    return FrozenPlan(
        manifest=manifest,
        plan_sha256=sha256_hex(manifest),
        dataset=dataset,
        targets=ordered_targets,
    )


def _check_mode(
    plan: dict[str, Any],
    targets: dict[str, Target],
    chosen: list[str],
    preview: bool,
    errors: dict[str, Any],
) -> None:
    """What a preview run needs, and what only a live run can do."""
    if preview:
        not_previewable = [
            s for s, t in targets.items() if t.kind != Target.Kind.MOM or not t.preview_url
        ]
        if not_previewable:
            errors["targets"] = (
                "a preview run needs MoM targets with a preview_url: "
                f"{', '.join(sorted(not_previewable))}"
            )
        unknown_context = set(plan["preview_context"]) - {
            "session_id",
            "conversation_id",
            "sampling_seed",
        }
        if unknown_context:
            errors["preview_context"] = f"unknown field(s): {', '.join(sorted(unknown_context))}"
    elif plan["preview_context"]:
        errors["preview_context"] = "only a preview run takes a preview_context"
    unsupported = [b for b in chosen if ADAPTERS[b].kind not in SUPPORTED_KINDS]
    if unsupported and not preview:
        errors["benchmarks"] = f"not runnable yet (agent tasks): {', '.join(unsupported)}"


def _single_model(slug: str, role: str) -> tuple[Target | None, str]:
    """An active single-model target by slug, or why it cannot serve as `role`."""
    target = Target.objects.filter(slug=slug, active=True).first()
    if target is None:
        return None, f"unknown {role} target {slug}"
    if target.kind != Target.Kind.SINGLE:
        return None, f"a {role} must be a single model"
    return target, ""


def _graders_resolve(
    plan: dict[str, Any], chosen: list[str], errors: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], dict[str, Target]]:
    """The judge and user-simulator targets of the chosen benchmarks, snapshotted."""
    judges: dict[str, dict[str, Any]] = {}
    simulators: dict[str, dict[str, Any]] = {}
    helpers: dict[str, Target] = {}
    for benchmark in chosen:
        needs_judge, needs_simulator = _graders_needed(plan["judges"], benchmark)
        if needs_judge:
            slug = plan["judges"].get(benchmark)
            judge, why = _single_model(slug, "judge") if slug else (None, "")
            if judge is not None:
                judges[benchmark] = _target_snapshot(judge)
                helpers[slug] = judge
            else:
                errors.setdefault("judges", {})[benchmark] = why or JUDGE_REQUIRED
        if needs_simulator:
            slug = plan["simulators"].get(benchmark)
            user, why = _single_model(slug, "simulator") if slug else (None, "")
            if user is not None:
                simulators[benchmark] = _target_snapshot(user)
                helpers[slug] = user
            else:
                errors.setdefault("simulators", {})[benchmark] = why or SIMULATOR_REQUIRED
    return judges, simulators, helpers


JUDGE_REQUIRED = "a judge target is required"
SIMULATOR_REQUIRED = "a user-simulator target is required"


def _graders_needed(judges: dict[str, Any], benchmark: str) -> tuple[bool, bool]:
    """Whether a chosen benchmark needs a judge target and a user-simulator target. τ³ takes an
    optional judge for tasks with natural-language assertions (without one those tasks end
    unscored, never silently passed); it needs its user simulator."""
    simulated = benchmark in USER_SIMULATED
    judged = benchmark in ADAPTERS and (ADAPTERS[benchmark].kind == "judge" or simulated)
    return judged and not (simulated and benchmark not in judges), simulated


def _check_options(
    plan: dict[str, Any], chosen: list[str], preview: bool, errors: dict[str, Any]
) -> None:
    """Judges, simulators and official scoring named for benchmarks that do not take them."""
    extra_simulators = sorted(set(plan["simulators"]) - set(chosen))
    if extra_simulators:
        errors.setdefault("simulators", {})["_"] = (
            f"simulator for unselected: {', '.join(extra_simulators)}"
        )
    needless = sorted(
        b
        for b in plan["judges"]
        if b in chosen and ADAPTERS[b].kind != "judge" and b not in USER_SIMULATED
    )
    if needless:
        errors.setdefault("judges", {})["_needless"] = (
            f"these benchmarks take no judge: {', '.join(needless)}"
        )
    not_chosen = sorted(set(plan["official_scoring"]) - set(chosen))
    if not_chosen and not preview:
        errors["official_scoring"] = f"not among the selected benchmarks: {', '.join(not_chosen)}"
    elif plan["official_scoring"] and preview:
        errors["official_scoring"] = "a preview run grades nothing"
    extra_judges = sorted(set(plan["judges"]) - set(chosen))
    if extra_judges:
        errors.setdefault("judges", {})["_"] = f"judge for unselected: {', '.join(extra_judges)}"
    _check_prompting(plan["official_prompting"], chosen, preview, errors)


def _check_prompting(
    prompted: list[str], chosen: list[str], preview: bool, errors: dict[str, Any]
) -> None:
    """Official prompts asked for: selected benchmarks of a live run, whose package is here (a
    run asked for official prompts is never asked in sr-bench's under that name)."""
    if not prompted:
        return
    if preview:
        errors["official_prompting"] = "a preview run asks no subject"
        return
    if not_chosen := sorted(set(prompted) - set(chosen)):
        errors["official_prompting"] = f"not among the selected benchmarks: {', '.join(not_chosen)}"
        return
    for b in prompted:
        try:
            load_prompting(b)
        except PromptingUnavailable as exc:
            errors.setdefault("official_prompting", {})[b] = f"not available here: {exc}"


def _manifest_build(
    *,
    plan: dict[str, Any],
    dataset: FrozenDataset,
    chosen: list[str],
    cases: list[list[Any]],
    ordered_targets: list[Target],
    judges: dict[str, dict[str, Any]],
    simulators: dict[str, dict[str, Any]],
    priced_targets: list[Target],
    not_run: list[dict[str, Any]],
) -> dict[str, Any]:
    """The canonical manifest. Optional keys appear only when set, so other plans keep their
    hash."""
    manifest = {
        "version": MANIFEST_VERSION,
        "name": plan["name"],
        "mode": plan["mode"],
        "dataset": {
            "id": dataset.pk,
            "identity_sha256": dataset.identity_sha256,
            "profile": dataset.profile,
            "seed": dataset.seed,
            "split": dataset.split,
        },
        "benchmarks": {
            b: {
                "weight": str(ADAPTERS[b].weight),
                "kind": ADAPTERS[b].kind,
                "grader_version": ADAPTERS[b].grader_version,
                "cases": sum(1 for c in cases if c[2] == b),
            }
            for b in chosen
        },
        "cases": cases,
        "targets": [_target_snapshot(t) for t in ordered_targets],
        "judges": judges,
        "simulators": simulators,
        "prices": {t.slug: t.prices for t in priced_targets},
        "sampling": dict(plan["sampling"]),
        "limits": {
            k: (str(v) if k == "max_cost_usd" and v is not None else v)
            for k, v in plan["limits"].items()
        },
        "failure_policy": plan["failure_policy"],
        "preview_context": dict(plan["preview_context"]),
        "slots": plan["slots"],
    }
    for b in chosen:
        if ADAPTERS[b].episode == "tau":
            manifest["benchmarks"][b]["tau_max_turns"] = plan["tau_max_turns"]
    for b in plan["official_scoring"]:
        if b in manifest["benchmarks"]:
            # Not installed: frozen as "not available here" with the reason, and no official
            # judge call is made.
            manifest["benchmarks"][b]["official_scoring"] = official_manifest_entry(b)
    for b in plan["official_prompting"]:
        if b in manifest["benchmarks"]:
            manifest["benchmarks"][b]["official_prompting"] = load_prompting(b).manifest_entry()
    if not_run:
        manifest["not_run"] = not_run
    if plan["non_inferiority_margin"] is not None:
        manifest["non_inferiority_margin"] = margin_text(plan["non_inferiority_margin"])
    return manifest
