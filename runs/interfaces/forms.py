"""Forms of the run pages: the Runs filters and Create evaluation (R7.1, R8).

Create evaluation is typed form controls only (R8.5): each field maps onto one key of the
plan that `runs.planning.plans.plan_freeze` validates, and that serializer stays the one place where
a plan's rules live — its errors are shown next to the fields they name.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from datasets.benchmarks import ADAPTERS
from datasets.models import FrozenDataset, Profile, Source
from datasets.profiles import PROFILE_SPLIT
from runs.engine.tau_episode import DEFAULT_TAU_MAX_TURNS
from runs.models import RunStatus, Target
from runs.planning.plans import (
    SUPPORTED_KINDS,
    USER_SIMULATED,
    LimitsSerializer,
    SamplingSerializer,
)
from runs.vocabulary.limits import MAX_RUN_SECONDS
from runs.vocabulary.recovery_modes import RecoveryPlanMode
from srbench.query_params import query_params_problems


class RunFilterForm(forms.Form):
    name = forms.CharField(required=False, max_length=200)
    model = forms.CharField(required=False, max_length=200, label="Model or target")
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *RunStatus.choices])
    mode = forms.ChoiceField(
        required=False, choices=[("", "Any mode"), ("live", "live"), ("preview", "preview")]
    )
    profile = forms.ChoiceField(required=False, choices=[("", "Any profile"), *Profile.choices])
    sort = forms.ChoiceField(
        required=False,
        label="Sort by",
        choices=[
            ("", "newest first"),
            ("oldest", "oldest first"),
            ("score", "score (best target)"),
            ("spend", "known spend"),
            ("completeness", "completeness"),
        ],
    )

    def filters(self) -> dict[str, str]:
        """The filters that are valid. A refused value (a stale or hand-edited URL) drops only
        itself, never the other filters, and `refused` names it (issue 35 item 7)."""
        self.is_valid()
        data = self.cleaned_data
        return {n: (data.get(n) or "").strip() for n in self.fields if n != "sort"}

    def ordering(self) -> str:
        self.is_valid()
        return self.cleaned_data.get("sort") or ""

    def refused(self) -> list[dict[str, str]]:
        """Each refused value in words: which field, what value, and what it accepts."""
        self.is_valid()
        out = []
        for name in self.errors:
            field = self.fields[name]
            if isinstance(field, forms.ChoiceField):
                # django-stubs types choices as a union with a callable; a form field's are a list.
                accepted = ", ".join(str(v) for v, _ in list(field.choices) if v)  # type: ignore[arg-type]
                reason = f"not one of: {accepted}"
            else:
                reason = " ".join(str(m) for m in self.errors[name]).rstrip(".")
            value = self.data.get(name, "")
            shown = value if len(value) <= 60 else value[:60] + "…"
            out.append({"label": str(self[name].label), "value": shown, "reason": reason})
        return out


def _role_default(targets: list[Target], words: tuple[str, ...]) -> str | None:
    """The registry's target for a role, when exactly one single-model target names it (in
    its slug, name or model): e.g. `sim-judge` for judges, `sim-user` for τ³'s user. None
    (the user chooses) when none or several do."""
    matching = [
        t for t in targets if any(w in f"{t.slug} {t.name} {t.model}".lower() for w in words)
    ]
    return matching[0].slug if len(matching) == 1 else None


def _limit_default(name: str) -> Any:
    return LimitsSerializer().fields[name].default


def _sampling_bound(name: str, end: str) -> Any:
    """The plan's own bound of a sampling field (`SamplingSerializer`), so the form and the
    plan refuse the same values."""
    return getattr(SamplingSerializer().fields[name], f"{end}_value")


REQUIRED_WORDS = {"name": "Give the evaluation a name.", "targets": "Tick at least one target."}


def _required_words(name: str, field: forms.Field, label: Any) -> str:
    """What an empty required field is told, naming what it asks for."""
    if name in REQUIRED_WORDS:
        return REQUIRED_WORDS[name]
    verb = "Choose" if isinstance(field, forms.ChoiceField) else "Enter"
    return f"{verb} the {str(label).lower()}."


class EvaluationForm(forms.Form):
    """Profile → benchmarks → targets → sampling, budget and limits → judges → review."""

    profile = forms.ChoiceField(choices=Profile.choices, widget=forms.RadioSelect)
    seed = forms.TypedChoiceField(coerce=int, required=False)
    # "Evaluate dataset": the chosen frozen dataset, reused as it is when all of it is ticked.
    dataset = forms.IntegerField(required=False, widget=forms.HiddenInput)
    name = forms.CharField(max_length=200)
    # "Select all benchmarks" is a client-side convenience that ticks the boxes (base.html);
    # it is not a field: what is submitted is exactly the ticked boxes (issue 23).
    benchmarks = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Prepared benchmarks"
    )
    targets = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)

    # Sampling (whitelisted generation fields, SAMPLING_FIELDS); blank = the target's default.
    temperature = forms.FloatField(required=False, min_value=0, max_value=2)
    top_p = forms.FloatField(required=False, min_value=0, max_value=1, label="Top p")
    top_k = forms.IntegerField(
        required=False, min_value=1, max_value=_sampling_bound("top_k", "max"), label="Top k"
    )
    sampling_seed = forms.IntegerField(
        required=False,
        min_value=_sampling_bound("seed", "min"),
        max_value=_sampling_bound("seed", "max"),
        label="Seed",
    )
    presence_penalty = forms.FloatField(required=False, min_value=-2, max_value=2)
    frequency_penalty = forms.FloatField(required=False, min_value=-2, max_value=2)
    reasoning_effort = forms.ChoiceField(
        required=False,
        choices=[("", "target default"), *((v, v) for v in ("minimal", "low", "medium", "high"))],
    )
    stop = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Stop sequences",
        help_text="One per line, at most 4.",
    )

    # Budget
    max_cost_usd = forms.DecimalField(
        required=False,
        min_value=Decimal(0),
        max_digits=14,
        decimal_places=6,
        label="Max cost (USD)",
        help_text="Dispatch stops before a call that could exceed it. Blank = no cap.",
    )
    # Request limits
    total_timeout_s = forms.FloatField(
        min_value=1, initial=_limit_default("total_timeout_s"), label="Request timeout (s)"
    )
    idle_timeout_s = forms.FloatField(
        min_value=0.5, initial=_limit_default("idle_timeout_s"), label="Stream idle timeout (s)"
    )
    max_output_tokens = forms.IntegerField(
        min_value=1, max_value=1_000_000, initial=_limit_default("max_output_tokens")
    )
    max_output_chars = forms.IntegerField(
        min_value=1, initial=_limit_default("max_output_chars"), label="Max output characters"
    )
    # Task limits
    concurrency = forms.IntegerField(
        min_value=1, max_value=4096, initial=_limit_default("concurrency")
    )
    max_calls_per_case = forms.IntegerField(
        min_value=1, max_value=1000, initial=_limit_default("max_calls_per_case")
    )
    case_timeout_s = forms.FloatField(
        min_value=1, initial=_limit_default("case_timeout_s"), label="Case timeout (s)"
    )
    max_run_seconds = forms.FloatField(
        min_value=1,
        max_value=MAX_RUN_SECONDS,
        initial=_limit_default("max_run_seconds"),
        label="Run deadline (s)",
    )
    failure_policy = forms.ChoiceField(
        choices=[
            ("stop", "stop at the first transport failure (fail closed)"),
            ("continue", "continue"),
        ],
        initial="stop",
    )
    slots = forms.IntegerField(min_value=1, max_value=16, initial=1, label="Attempts per case")
    # Issue 22 point 5: the official judge template beside sr-bench's (one more judge call).
    official_scoring = forms.MultipleChoiceField(
        required=False,
        choices=[("simpleqa", "SimpleQA"), ("hle", "HLE")],
        widget=forms.CheckboxSelectMultiple,
        label="Official scoring beside sr-bench's",
        help_text="Also grade with the official judge template (from the installed "
        "inspect-evals; one more judge call per case). ARC's official pass@2 needs 2 attempts.",
    )
    # Issue 37 item 3: the benchmark's own prompts (and LiveCodeBench's own grader beside ours).
    official_prompting = forms.MultipleChoiceField(
        required=False,
        choices=[("livecodebench", "LiveCodeBench"), ("scicode", "SciCode")],
        widget=forms.CheckboxSelectMultiple,
        label="Official prompts instead of sr-bench's",
        help_text="Ask in the benchmark's own prompts, read from the installed "
        "nvidia-livecodebench / nvidia-scicode with their hashes frozen in the plan; "
        "LiveCodeBench's official grader runs beside ours.",
    )
    # Issue 37 item 2: τ episodes end after this many agent turns (the official τ² default).
    tau_max_turns = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=1000,
        initial=DEFAULT_TAU_MAX_TURNS,
        label="τ agent-turn limit",
        help_text="An episode that reaches it is reported as capped (official τ² limit: "
        f"{DEFAULT_TAU_MAX_TURNS}).",
    )
    # R5.5: fixed before the run and frozen into the manifest; the plan checks 0 < margin < 1.
    non_inferiority_margin = forms.DecimalField(
        required=False,
        max_digits=5,
        decimal_places=4,
        label="Non-inferiority margin",
        help_text="Optional, e.g. 0.05, fixed before the run: the only way a comparison can "
        "call a candidate non-inferior (quality kept), and only on standard (holdout) cases.",
    )

    # Route preview (R8.7): optional, MoM targets only, never a model call.
    preview_prompt = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), label="Prompt"
    )
    preview_history = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Earlier turns",
        help_text='Optional conversation context, one turn a line: "user: …" or "assistant: …".',
    )
    preview_session = forms.CharField(required=False, max_length=200, label="Session ID")
    preview_conversation = forms.CharField(required=False, max_length=200, label="Conversation ID")

    SAMPLING = (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("sampling_seed", "seed"),
        ("presence_penalty", "presence_penalty"),
        ("frequency_penalty", "frequency_penalty"),
        ("reasoning_effort", "reasoning_effort"),
    )
    LIMITS = (
        "total_timeout_s",
        "idle_timeout_s",
        "max_output_tokens",
        "max_output_chars",
        "concurrency",
        "max_calls_per_case",
        "case_timeout_s",
        "max_run_seconds",
    )

    def __init__(
        self,
        *args: Any,
        profile: str,
        seed: int | None,
        sources: list[Source],
        seeds: list[int],
        dataset: FrozenDataset | None,
        dataset_benchmarks: list[str],
        targets: list[Target],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        # Not `self.profile`: a template's `form.profile` looks up the field first.
        self.profile_name = profile
        self.split_name = PROFILE_SPLIT[profile]  # type: ignore[index]
        self.chosen_dataset = dataset
        self.fields["seed"].choices = [(s, str(s)) for s in seeds]
        if seed is not None:
            self.fields["seed"].initial = seed
        # Only sources of this profile, seed and its split are offered (R8.1, R8.2); a
        # chosen dataset offers its own benchmarks, which share those by construction.
        self.sources = {s.benchmark: s for s in sources}
        offered = dataset_benchmarks if dataset is not None else list(self.sources)
        self.offered = sorted(offered, key=list(ADAPTERS).index)
        self.runnable = [b for b in self.offered if ADAPTERS[b].kind in SUPPORTED_KINDS]
        self.fields["benchmarks"].choices = [(b, b) for b in self.runnable]
        self.targets = targets
        self.fields["targets"].choices = [(t.slug, t.slug) for t in targets]
        singles = [t for t in targets if t.kind == Target.Kind.SINGLE]
        choices = [
            (t.slug, f"{t.slug} ({t.name})" if t.name != t.slug else t.slug) for t in singles
        ]
        # One judge control per judged benchmark on offer (R8; a judge must be a single model);
        # τ³ takes an optional one for its natural-language assertions.
        self.judged = [
            b for b in self.runnable if ADAPTERS[b].kind == "judge" or b in USER_SIMULATED
        ]
        judge_default = _role_default(singles, ("judge",))
        for benchmark in self.judged:
            optional = benchmark in USER_SIMULATED
            self.fields[f"judge_{benchmark}"] = forms.ChoiceField(
                required=False,
                label=f"Judge for {benchmark}" + (" (optional)" if optional else ""),
                choices=[("", "no judge" if optional else "choose a judge"), *choices],
                # τ³ too: without a judge its natural-language assertions end unscored.
                initial=judge_default,
                help_text="Judges τ³'s natural-language assertions; without one those tasks "
                "end unscored, never passed."
                if optional
                else "",
            )
        # Who plays the user in τ³ (a single-model target; R8).
        self.simulated = [b for b in self.runnable if b in USER_SIMULATED]
        simulator_default = _role_default(singles, ("user", "simulator"))
        for benchmark in self.simulated:
            self.fields[f"simulator_{benchmark}"] = forms.ChoiceField(
                required=False,
                label=f"User simulator for {benchmark}",
                choices=[("", "choose a user simulator"), *choices],
                initial=simulator_default,
            )

        # Our words for an empty required field, naming it (not Django's "This field is
        # required."): the error summary puts the label before them.
        for name, field in self.fields.items():
            field.error_messages["required"] = _required_words(name, field, self[name].label)

    # --- rows for the template -----------------------------------------------------------

    def benchmark_rows(self) -> list[dict[str, Any]]:
        """One row per offered benchmark; a source without questions is shown, unselectable,
        with its reason (issue 35 item 7)."""
        rows = []
        for benchmark in self.offered:
            source = self.sources.get(benchmark)
            empty = benchmark in self.empty_sources()
            rows.append(
                {
                    "benchmark": benchmark,
                    "kind": ADAPTERS[benchmark].kind,
                    "source": source,
                    "runnable": benchmark in self.runnable,
                    "empty": empty,
                    "selectable": benchmark in self.runnable and not empty,
                    "checked": benchmark in (self._selected_values("benchmarks")),
                }
            )
        return rows

    def empty_sources(self) -> list[str]:
        """The offered benchmarks whose prepared source holds no question (e.g. a standard
        split prepared from a file that has only dev questions): nothing to evaluate there.
        A chosen dataset offers only benchmarks it has questions of."""
        if self.chosen_dataset is not None:
            return []
        return [b for b, source in self.sources.items() if source.count == 0]

    def empty_reason(self, benchmark: str) -> str:
        source = self.sources[benchmark]
        return (
            f"{benchmark} has no question in its {self.profile_name} source (0 of "
            f"{source.requested_count} prepared, seed {source.seed}, {source.split} split), so "
            "there is nothing to evaluate. Untick it, or prepare it again from a file that "
            "holds its questions."
        )

    def target_rows(self) -> list[dict[str, Any]]:
        chosen = self._selected_values("targets")
        return [{"target": t, "checked": t.slug in chosen} for t in self.targets]

    def judge_fields(self) -> list[forms.BoundField]:
        return [self[f"judge_{b}"] for b in self.judged]

    def simulator_fields(self) -> list[forms.BoundField]:
        return [self[f"simulator_{b}"] for b in self.simulated]

    def sampling_fields(self) -> list[forms.BoundField]:
        return [self[name] for name, _ in self.SAMPLING] + [self["stop"]]

    def _selected_values(self, name: str) -> list[str]:
        if self.is_bound:
            return self.data.getlist(name) if hasattr(self.data, "getlist") else []
        return list(self.initial.get(name, []))

    # --- validation -----------------------------------------------------------------------

    def clean_stop(self) -> list[str]:
        lines = [line for line in self.cleaned_data["stop"].splitlines() if line.strip()]
        if len(lines) > 4:
            raise forms.ValidationError("At most 4 stop sequences.")
        return lines

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        chosen = data.get("benchmarks")
        if not chosen and "benchmarks" not in self.errors:
            self.add_error("benchmarks", "Tick at least one benchmark.")
        # Refused here too, not only disabled on the page: a hand-made POST can tick it.
        for benchmark in [b for b in chosen or [] if b in self.empty_sources()]:
            self.add_error("benchmarks", self.empty_reason(benchmark))
        return data

    # --- the error summary (issue 35 item 7) ------------------------------------------------

    def _page_order(self) -> list[str]:
        """The fields in the order the page shows them, so the summary reads top to bottom."""
        shown = [
            "profile",
            "seed",
            "dataset",
            "benchmarks",
            "targets",
            *(f"judge_{b}" for b in self.judged),
            *(f"simulator_{b}" for b in self.simulated),
            *(name for name, _ in self.SAMPLING),
            "stop",
            "max_cost_usd",
            *self.LIMITS,
            "slots",
            "failure_policy",
            "non_inferiority_margin",
            "official_scoring",
            "official_prompting",
            "tau_max_turns",
            "preview_prompt",
            "preview_history",
            "preview_session",
            "preview_conversation",
            "name",
        ]
        return shown + [name for name in self.fields if name not in shown]

    def _anchor(self, name: str) -> str:
        """The id a summary link jumps to: the first tickable box of a box group, the
        profile step for the profile, else the field's own input."""
        if name == "benchmarks":
            boxes = [r["benchmark"] for r in self.benchmark_rows() if r["selectable"]]
            return f"bench-{boxes[0]}" if boxes else "benchmarks"
        if name == "targets":
            first = next(iter(self.target_rows()), None)
            return f"target-{first['target'].slug}" if first else "targets"
        if name in ("profile", "seed", "dataset"):
            return "profile-step"
        return self[name].id_for_label or name

    def error_summary(self) -> list[dict[str, str]]:
        """Every error of the form, in page order, each with the label of its field and the
        id to link to; errors that belong to no field come first, without a link."""
        errors = self.errors
        out = [{"label": "", "message": str(m), "anchor": ""} for m in self.non_field_errors()]
        for name in self._page_order():
            for message in errors.get(name, []):
                label = "Prepared benchmarks" if name == "benchmarks" else str(self[name].label)
                out.append({"label": label, "message": str(message), "anchor": self._anchor(name)})
        return out

    def preview_has_errors(self) -> bool:
        return any(name.startswith("preview_") for name in self.errors)

    def selected_benchmarks(self) -> list[str]:
        return sorted(self.cleaned_data.get("benchmarks") or [], key=list(ADAPTERS).index)

    def _limits(self) -> dict[str, Any] | None:
        """The plan's limits, or None while the form refused any of them: a default standing
        in for a refused limit would judge the others against a value nobody gave."""
        data = self.cleaned_data
        if any(name not in data for name in (*self.LIMITS, "max_cost_usd")):
            return None
        limits: dict[str, Any] = {name: data[name] for name in self.LIMITS}
        limits["max_cost_usd"] = None if data["max_cost_usd"] is None else str(data["max_cost_usd"])
        return limits

    def plan(self, *, dataset_id: int, benchmarks: list[str] | None) -> dict[str, Any]:
        """The plan document plan_freeze validates; blank sampling fields are left out so the
        target's own defaults apply. Of a refused form, the plan as far as the fields that
        passed hold it (the others left out), for the plan's own rules to be checked beside
        the form's (`runs.planning.plans.plan_field_errors`)."""
        data = self.cleaned_data
        sampling: dict[str, Any] = {}
        for field, key in self.SAMPLING:
            value = data.get(field)
            if value not in (None, ""):
                sampling[key] = value
        if data.get("stop"):
            sampling["stop"] = data["stop"]
        selected = self.selected_benchmarks()
        judges = {
            b: data[f"judge_{b}"] for b in selected if b in self.judged and data.get(f"judge_{b}")
        }
        simulators = {
            b: data[f"simulator_{b}"]
            for b in selected
            if b in self.simulated and data.get(f"simulator_{b}")
        }
        given = {
            "name": data.get("name"),
            "targets": data.get("targets"),
            "limits": self._limits(),
            "failure_policy": data.get("failure_policy"),
            "slots": data.get("slots"),
        }
        plan: dict[str, Any] = {
            "dataset": dataset_id,
            "sampling": sampling,
            "judges": judges,
            "simulators": simulators,
            **{key: value for key, value in given.items() if value is not None},
        }
        if data.get("non_inferiority_margin") is not None:
            plan["non_inferiority_margin"] = str(data["non_inferiority_margin"])
        scope = benchmarks or selected
        official = [b for b in data.get("official_scoring") or [] if not scope or b in scope]
        if official:
            plan["official_scoring"] = official
        prompted = [b for b in data.get("official_prompting") or [] if not scope or b in scope]
        if prompted:
            plan["official_prompting"] = prompted
        if data.get("tau_max_turns") is not None:  # else the plan's default, the same value
            plan["tau_max_turns"] = data["tau_max_turns"]
        if benchmarks:
            plan["benchmarks"] = benchmarks
        return plan

    def preview_messages(self) -> list[dict[str, str]] | None:
        """Earlier turns + the prompt as a message list, or None when there are no turns."""
        history = self.cleaned_data.get("preview_history") or ""
        turns = []
        for line in history.splitlines():
            role, sep, text = line.partition(":")
            role = role.strip().lower()
            if not sep or role not in ("user", "assistant", "system"):
                raise forms.ValidationError(f'Not a turn: "{line[:60]}" (use "user: …").')
            turns.append({"role": role, "content": text.strip()})
        if not turns:
            return None
        return [*turns, {"role": "user", "content": self.cleaned_data["preview_prompt"]}]


# The recovery page's two scopes (R15.2, R15.3); a judge-only completion is the page's own
# section of either review, never a third tab.
RECOVERY_SCOPES = (
    (RecoveryPlanMode.UNDISPATCHED, "Continue undispatched cases"),
    (RecoveryPlanMode.FAILED, "Retry known failed cases as new attempts"),
)


class RecoveryScopeForm(forms.Form):
    """The scope the recovery page reviews, or its no-JS form submits: one of the two, at most
    once; none given is undispatched. Any other value was reviewed — and submitted — as
    undispatched without a word (`?mode=faild` showed the undispatched plan)."""

    mode = forms.ChoiceField(
        required=False,
        choices=RECOVERY_SCOPES,
        error_messages={
            "invalid_choice": "%(value)s is not a recovery scope of this page: choose "
            + " or ".join(f"{value} ({label})" for value, label in RECOVERY_SCOPES)
            + "; judged cells whose judge call never ran are completed from the Judge only "
            "section of either review. Nothing was reviewed or created."
        },
    )

    def clean_mode(self) -> str:
        # The one query-string rule (srbench.query_params) for a repeated mode; the page's
        # other fields (cells, key, cursors) are not this form's.
        repeated = query_params_problems(self.data, set(self.data), ("mode",))
        if repeated:
            raise forms.ValidationError(repeated["mode"])
        return self.cleaned_data["mode"] or RecoveryPlanMode.UNDISPATCHED
