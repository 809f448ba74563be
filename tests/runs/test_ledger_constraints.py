"""Every invariant of DESIGN §3 that the database can enforce is enforced by PostgreSQL itself:
each test makes the forbidden write and expects IntegrityError (issue 2)."""

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from datasets.models import (
    DatasetQuestion,
    FrozenDataset,
    Question,
    QuestionSecret,
    Source,
    SourceQuestion,
)
from recipes.models import Recipe
from runs.models import (
    Call,
    CallEvidence,
    Cell,
    RecoveryClaim,
    RecoveryRequest,
    Run,
    RunEvent,
    Target,
    UsageCorrection,
)
from srbench.ledger import ImmutableRecordError
from tests import factories as f

pytestmark = pytest.mark.django_db

H = "b" * 64


def rejected(write) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        write()


# --- targets ---------------------------------------------------------------------------------


def test_target_slug_is_unique():
    f.target_create(slug="gpt")
    rejected(lambda: f.target_create(slug="gpt"))


def test_target_kind_must_be_known():
    rejected(lambda: f.target_create(kind="ensemble"))


def test_mom_target_needs_a_config_hash():
    rejected(lambda: f.target_create(kind="mom", model="auto"))
    assert f.target_create(kind="mom", model="auto", config_hash=H).pk


def test_config_hash_must_be_64_lowercase_hex():
    rejected(lambda: f.target_create(kind="mom", config_hash="ABC"))
    rejected(lambda: f.target_create(kind="mom", config_hash="G" * 64))


def test_capture_recipe_needs_a_mom_target_with_preview_url():
    rejected(lambda: f.target_create(kind="mom", config_hash=H, capture_recipe=True))
    rejected(
        lambda: f.target_create(
            capture_recipe=True, preview_url="http://127.0.0.1:8100/api/v1/routing/preview"
        )
    )


def test_target_slug_format_is_enforced():
    rejected(lambda: f.target_create(slug="Has Spaces"))


# --- datasets --------------------------------------------------------------------------------


def source_kwargs(**over):
    kw = dict(
        benchmark="mmlu-pro",
        profile="smoke",
        seed=1,
        split="dev",
        content_sha256=H,
        provenance={},
        requested_count=14,
        count=14,
    )
    kw.update(over)
    return kw


def test_source_coordinate_is_unique():
    Source.objects.create(**source_kwargs())
    rejected(lambda: Source.objects.create(**source_kwargs()))


def test_source_is_never_padded_beyond_its_request():
    rejected(lambda: Source.objects.create(**source_kwargs(count=15)))


def test_source_profile_split_and_benchmark_must_be_known():
    rejected(lambda: Source.objects.create(**source_kwargs(profile="huge")))
    rejected(lambda: Source.objects.create(**source_kwargs(split="train")))
    rejected(lambda: Source.objects.create(**source_kwargs(benchmark="trivia")))


def test_source_question_position_and_membership_are_unique():
    s = Source.objects.create(**source_kwargs())
    q1, q2 = f.question_create(), f.question_create()
    SourceQuestion.objects.create(source=s, question=q1, position=0)
    rejected(lambda: SourceQuestion.objects.create(source=s, question=q2, position=0))
    rejected(lambda: SourceQuestion.objects.create(source=s, question=q1, position=1))


def test_question_content_is_stored_once():
    q = f.question_create()
    rejected(lambda: f.question_create(content_sha256=q.content_sha256))


def test_question_has_at_most_one_secret():
    q = f.question_create()
    rejected(lambda: QuestionSecret.objects.create(question=q, data={"answer": "C"}))


def test_frozen_dataset_identity_is_unique():
    d = f.dataset_create()
    rejected(lambda: f.dataset_create(identity_sha256=d.identity_sha256))


def test_dataset_question_position_and_membership_are_unique():
    d = f.dataset_create()
    q1, q2 = f.question_create(), f.question_create()
    DatasetQuestion.objects.create(dataset=d, question=q1, position=0)
    rejected(lambda: DatasetQuestion.objects.create(dataset=d, question=q2, position=0))
    rejected(lambda: DatasetQuestion.objects.create(dataset=d, question=q1, position=1))


def test_question_in_use_cannot_be_deleted():
    d = f.dataset_create()
    q = f.question_create()
    DatasetQuestion.objects.create(dataset=d, question=q, position=0)
    rejected(lambda: Question.objects.filter(pk=q.pk).delete())


def test_prepared_source_content_cannot_change():
    s = Source.objects.create(**source_kwargs())
    rejected(lambda: Source.objects.filter(pk=s.pk).update(count=3))


def test_question_payload_cannot_change():
    q = f.question_create()
    rejected(lambda: Question.objects.filter(pk=q.pk).update(payload={"question": "other"}))


def test_frozen_dataset_selection_cannot_change():
    d = f.dataset_create()
    rejected(lambda: FrozenDataset.objects.filter(pk=d.pk).update(selection={}))


# --- runs ------------------------------------------------------------------------------------


def test_idempotency_key_is_unique_per_owner():
    owner = f.user_create()
    f.run_create(owner=owner, idempotency_key="k1")
    rejected(lambda: f.run_create(owner=owner, idempotency_key="k1"))
    assert f.run_create(idempotency_key="k1").pk  # another owner may use the same key
    assert f.run_create(owner=owner, idempotency_key=None).pk
    assert f.run_create(owner=owner, idempotency_key=None).pk


def test_run_status_and_mode_must_be_known():
    rejected(lambda: f.run_create(status="paused"))
    rejected(lambda: f.run_create(mode="dry"))


def test_run_plan_hash_must_be_hex():
    rejected(lambda: f.run_create(plan_sha256="not-a-hash"))


def test_run_cannot_be_its_own_parent():
    run = f.run_create()
    rejected(lambda: Run.objects.filter(pk=run.pk).update(parent=run))


def test_only_a_terminal_run_has_a_finish_time():
    rejected(lambda: f.run_create(status="running", finished_at=timezone.now()))


def test_frozen_manifest_cannot_change():
    run = f.run_create()
    rejected(lambda: Run.objects.filter(pk=run.pk).update(manifest={"other": 1}))
    rejected(lambda: Run.objects.filter(pk=run.pk).update(plan_sha256=H))
    Run.objects.filter(pk=run.pk).update(status="running")  # progress still moves
    # A full save names every column, so the guard still compares (and refuses) there.
    run.refresh_from_db()
    run.manifest = {"other": 2}
    rejected(lambda: run.save())


@pytest.mark.parametrize(
    ("table", "column"),
    [
        ("runs_run", "manifest"),
        ("runs_call", "request"),
        ("datasets_question", "payload"),
        ("datasets_questionsecret", "data"),
        ("datasets_source", "content_sha256"),
        ("datasets_frozendataset", "selection"),
    ],
)
def test_frozen_column_guards_fire_only_for_updates_that_name_them(table, column):
    """Issue 25: an UPDATE of status, lease or event sequence does not run the frozen guard,
    so a megabyte manifest or request is never decompressed to compare it."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t "
            "WHERE t.tgname = %s AND NOT t.tgisinternal",
            [f"{table}_frozen"],
        )
        (definition,) = cursor.fetchone()
    assert "BEFORE UPDATE OF " in definition, definition
    assert column in definition.split(" ON ")[0], definition


def test_parent_run_with_children_cannot_be_deleted():
    parent = f.run_create()
    f.run_create(parent=parent)
    rejected(lambda: Run.objects.filter(pk=parent.pk).delete())


def test_cell_coordinate_is_unique():
    cell = f.cell_create()
    rejected(
        lambda: Cell.objects.create(
            run=cell.run, question=cell.question, target=cell.target, slot=0, benchmark="mmlu-pro"
        )
    )


def test_cell_status_must_be_known_and_correct_needs_a_score():
    rejected(lambda: f.cell_create(status="done"))
    rejected(lambda: f.cell_create(correct=True, scored=False))


def test_run_with_cells_cannot_be_deleted():
    cell = f.cell_create()
    rejected(lambda: Run.objects.filter(pk=cell.run_id).delete())


def test_call_sequence_is_unique_per_cell_and_role():
    call = f.call_create()
    rejected(lambda: f.call_create(cell=call.cell, sequence=0))
    assert f.call_create(cell=call.cell, role="judge", sequence=0).pk


def test_call_tokens_and_cost_cannot_be_negative():
    rejected(lambda: f.call_create(output_tokens=-1))
    rejected(lambda: f.call_create(input_tokens=-5, output_tokens=1))
    rejected(lambda: f.call_create(output_tokens=3, cost_usd=Decimal("-0.01")))


def test_call_cost_needs_known_usage():
    rejected(lambda: f.call_create(cost_usd=Decimal("0.01")))


def test_call_status_and_role_must_be_known():
    rejected(lambda: f.call_create(status="retrying"))
    rejected(lambda: f.call_create(role="grader"))


def test_cell_with_calls_cannot_be_deleted():
    call = f.call_create()
    rejected(lambda: Cell.objects.filter(pk=call.cell_id).delete())


def test_finished_call_outcome_cannot_change():
    call = f.call_create(status="completed", output_tokens=10, input_tokens=5)
    rejected(lambda: Call.objects.filter(pk=call.pk).update(status="sent"))
    rejected(lambda: Call.objects.filter(pk=call.pk).update(output_tokens=11))


def test_sent_request_cannot_change():
    call = f.call_create()
    rejected(lambda: Call.objects.filter(pk=call.pk).update(request={"model": "other"}))


def evidence_create(call):
    return CallEvidence.objects.create(call=call, body=b"x", raw_size=1, sha256=H)


def test_evidence_is_one_per_call():
    call = f.call_create()
    evidence_create(call)
    rejected(lambda: evidence_create(call))


def test_evidence_cannot_be_updated_or_deleted_by_sql():
    call = f.call_create()
    evidence_create(call)
    rejected(lambda: CallEvidence.objects.filter(pk=call.pk)._raw_delete(CallEvidence.objects.db))
    from django.db import connection

    def raw_update():
        with connection.cursor() as cur:
            cur.execute("UPDATE runs_callevidence SET raw_size = 2 WHERE call_id = %s", [call.pk])

    rejected(raw_update)


def test_evidence_refuses_changes_through_the_orm():
    call = f.call_create()
    ev = evidence_create(call)
    with pytest.raises(ImmutableRecordError):
        ev.save()
    with pytest.raises(ImmutableRecordError):
        CallEvidence.objects.filter(pk=ev.pk).update(raw_size=3)
    with pytest.raises(ImmutableRecordError):
        ev.delete()


def correction_kwargs(run, **over):
    kw = dict(
        run=run,
        version=1,
        evidence_sha256=H,
        verified_count=1,
        changed_count=0,
        unverifiable_count=0,
        old_known_cost_usd=None,
        new_known_cost_usd=None,
        corrections={},
    )
    kw.update(over)
    return kw


def test_usage_correction_is_idempotent_by_evidence_and_versioned():
    run = f.run_create()
    UsageCorrection.objects.create(**correction_kwargs(run))
    rejected(lambda: UsageCorrection.objects.create(**correction_kwargs(run, version=2)))
    rejected(
        lambda: UsageCorrection.objects.create(**correction_kwargs(run, evidence_sha256="c" * 64))
    )
    rejected(
        lambda: UsageCorrection.objects.create(
            **correction_kwargs(run, version=0, evidence_sha256="d" * 64)
        )
    )


def test_usage_correction_cannot_be_changed_by_sql():
    run = f.run_create()
    c = UsageCorrection.objects.create(**correction_kwargs(run))
    rejected(
        lambda: UsageCorrection.objects.filter(pk=c.pk)._raw_delete(UsageCorrection.objects.db)
    )


def test_event_sequence_is_unique_positive_and_append_only():
    run = f.run_create()
    e = RunEvent.objects.create(run=run, seq=1, type="run.created")
    rejected(lambda: RunEvent.objects.create(run=run, seq=1, type="run.started"))
    rejected(lambda: RunEvent.objects.create(run=run, seq=0, type="run.started"))
    rejected(lambda: RunEvent.objects.filter(pk=e.pk)._raw_delete(RunEvent.objects.db))


def recovery_create(parent, **over):
    kw = dict(
        parent=parent,
        owner=parent.owner,
        idempotency_key="r1",
        mode="undispatched",
        plan_sha256=H,
        selected_cells_sha256=H,
    )
    kw.update(over)
    return RecoveryRequest.objects.create(**kw)


def test_recovery_key_is_unique_per_parent():
    parent = f.run_create(status="interrupted", finished_at=timezone.now())
    recovery_create(parent)
    rejected(lambda: recovery_create(parent))


def test_failed_mode_recovery_needs_acknowledgement():
    parent = f.run_create(status="interrupted", finished_at=timezone.now())
    rejected(lambda: recovery_create(parent, mode="failed"))
    assert recovery_create(
        parent, idempotency_key="r2", mode="failed", acknowledged_new_attempt=True
    ).pk


def test_a_recovery_request_stores_the_three_modes_and_no_other():
    """judge_only is stored as itself (migration 0023; it was recorded as undispatched, untrue
    once judge-only re-sends a judge call that failed at no cost) and needs no acknowledgement
    (it is no new attempt); a mode outside the three is refused by the database."""
    parent = f.run_create(status="interrupted", finished_at=timezone.now())
    assert recovery_create(parent, mode="judge_only").mode == "judge_only"
    rejected(lambda: recovery_create(parent, idempotency_key="r2", mode="rejudge"))


def test_a_cell_is_claimed_by_one_recovery_only():
    cell = f.cell_create()
    parent = cell.run
    r1 = recovery_create(parent)
    r2 = recovery_create(parent, idempotency_key="r2")
    RecoveryClaim.objects.create(cell=cell, request=r1)
    rejected(lambda: RecoveryClaim.objects.create(cell=cell, request=r2))


def test_a_child_run_belongs_to_one_recovery_and_is_not_its_parent():
    parent = f.run_create()
    child = f.run_create(parent=parent)
    recovery_create(parent, child=child)
    rejected(lambda: recovery_create(parent, idempotency_key="r2", child=child))
    rejected(lambda: recovery_create(parent, idempotency_key="r3", child=parent))


def recipe_create(run, target, **over):
    kw = dict(
        run=run,
        target=target,
        captured_at=timezone.now(),
        projection_sha256=H,
        source_config_hash=H,
        generated_config_hash=H,
        active_config_hash=H,
        etag='"1"',
        body={},
    )
    kw.update(over)
    return Recipe.objects.create(**kw)


def test_recipe_is_one_per_run_and_target():
    run, target = f.run_create(), f.target_create(kind="mom", config_hash=H)
    recipe_create(run, target)
    rejected(lambda: recipe_create(run, target))


def test_recipe_needs_matching_generated_and_active_hashes():
    run, target = f.run_create(), f.target_create(kind="mom", config_hash=H)
    rejected(lambda: recipe_create(run, target, active_config_hash="c" * 64))


def test_target_with_cells_cannot_be_deleted():
    cell = f.cell_create()
    rejected(lambda: Target.objects.filter(pk=cell.target_id).delete())
