from django.apps import AppConfig


class CompareConfig(AppConfig):
    name = "compare"

    def ready(self) -> None:
        from compare.figures import case_figures_keep
        from runs.ledger.hooks import register_run_end_hook

        # A run's per-cell figures are stored when it ends, so the first comparison that
        # reads it finds them (issue 25).
        register_run_end_hook(case_figures_keep)
