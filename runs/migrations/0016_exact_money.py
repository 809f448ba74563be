"""Exact money (issue 35 item 5, docs/decisions.md "Exact money"): every money column of the
ledger goes from numeric(20, 10) to numeric(40, 18), so a call priced at up to 12 decimals per
1M tokens (srbench.money.PRICE_MAX_PLACES) is stored with every digit of tokens × price / 10^6
instead of rounded to 10 places, and every sum of them is exact.

Two database objects name a cost column and must follow it:

- the `runs_call_finished` trigger (migration 0002) compares `cost_usd` in its WHEN clause, and
  PostgreSQL refuses to change the type of a column a trigger definition uses: it is dropped
  before the columns change and created again, unchanged, after;
- the live sums' pending table (migration 0011) was created `AS SELECT … FROM
  runs_livecallsums`, so it has its own numeric(40, 10) copies of the two cost columns, where a
  transaction's exact delta would be rounded before it reaches the sums: widened the same way.

Widening only adds scale, so every stored amount keeps its value (amounts stored rounded before
this migration stay as they were; `reconcile-usage` recomputes them exactly from the saved
evidence and appends a correction)."""

from typing import Any

from django.db import migrations, models

from srbench.dbguards import drop_trigger_sql, run_on_postgres

# Migration 0002's statement, as it was: the trigger is the same before and after.
FINISHED_CALL_TRIGGER = (
    "CREATE TRIGGER runs_call_finished BEFORE UPDATE ON runs_call FOR EACH ROW "
    "WHEN (OLD.status IN ('completed', 'failed', 'cancelled') AND ("
    "OLD.status IS DISTINCT FROM NEW.status OR OLD.usage_raw IS DISTINCT FROM NEW.usage_raw "
    "OR OLD.cost_usd IS DISTINCT FROM NEW.cost_usd OR OLD.content IS DISTINCT FROM NEW.content "
    "OR OLD.input_tokens IS DISTINCT FROM NEW.input_tokens "
    "OR OLD.output_tokens IS DISTINCT FROM NEW.output_tokens)) "
    "EXECUTE FUNCTION srbench_refuse_change('finished call');"
)
DROP_FINISHED_CALL_TRIGGER = drop_trigger_sql("runs_call", "finished")


def _pending_money(digits: int, places: int) -> list[str]:
    return [
        "ALTER TABLE runs_livecallsums_pending "
        f"ALTER COLUMN cost_usd TYPE numeric({digits}, {places}), "
        f"ALTER COLUMN cache_neutral_cost_usd TYPE numeric({digits}, {places});"
    ]


def _money(**kwargs: Any) -> models.DecimalField:
    return models.DecimalField(decimal_places=18, max_digits=40, **kwargs)


MONEY_FIELDS: list[tuple[str, str, dict[str, Any]]] = [
    ("call", "cache_neutral_cost_usd", {"blank": True, "null": True}),
    ("call", "cost_usd", {"blank": True, "null": True}),
    ("call", "reserved_cost_usd", {"blank": True, "null": True}),
    ("livecallsums", "cache_neutral_cost_usd", {"default": 0}),
    ("livecallsums", "cost_usd", {"default": 0}),
    ("run", "budget_committed_usd", {"default": 0}),
    ("runreport", "known_spend_usd", {"blank": True, "null": True}),
    ("usagecorrection", "new_known_cost_usd", {"null": True}),
    ("usagecorrection", "old_known_cost_usd", {"null": True}),
]


class Migration(migrations.Migration):
    dependencies = [("runs", "0015_fencing")]

    operations = [
        # Backwards, the trigger is created again after the columns are narrowed back.
        migrations.RunPython(
            run_on_postgres([DROP_FINISHED_CALL_TRIGGER]),
            run_on_postgres([FINISHED_CALL_TRIGGER]),
        ),
        *[
            migrations.AlterField(model_name=model, name=name, field=_money(**options))
            for model, name, options in MONEY_FIELDS
        ],
        migrations.RunPython(
            run_on_postgres([*_pending_money(40, 18), FINISHED_CALL_TRIGGER]),
            run_on_postgres([DROP_FINISHED_CALL_TRIGGER, *_pending_money(40, 10)]),
        ),
    ]
