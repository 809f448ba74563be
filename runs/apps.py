from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def import_models(self) -> None:
        """`runs.models` and, beside it, the preflight models (issue 39), kept in their own
        module because `runs/models.py` is at its size limit."""
        super().import_models()
        import runs.models.preflight  # noqa: F401

    def ready(self) -> None:
        # A usage correction or a regrade stores the run's report in its own commit (issue 38
        # item 1); `runs.ledger.corrections` cannot import the report, which reads its records.
        from runs.ledger.corrections import register_append_hook
        from runs.reporting.stored_report import report_keep_appended

        register_append_hook(report_keep_appended)

        # The engine keeps a driven run's live figures young through a hook it is given, never
        # by importing the live results (issue 36 item 1).
        from runs.ledger.hooks import register_live_snapshot_keeper, register_report_keeper
        from runs.reporting.live_report import snapshot_keep
        from runs.reporting.stored_report import report_keep_settled

        register_live_snapshot_keeper(snapshot_keep)
        register_report_keeper(report_keep_settled)
