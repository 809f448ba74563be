from django.apps import AppConfig


class CompareConfig(AppConfig):
    name = "compare"

    def ready(self) -> None:
        from compare.figures import case_figures_keep
        from compare.plan_cases import runs_without_plan_cases
        from compare.services import savings_sums_keep
        from runs.ledger.hooks import register_run_end_backlog, register_run_end_hook

        # A run's per-cell figures are stored when it ends, so the first comparison that
        # reads it finds them (issue 25); then its packed cases and the savings bootstrap's
        # sums of its targets, which that comparison would otherwise draw (issue 38).
        register_run_end_hook(case_figures_keep)
        register_run_end_hook(savings_sums_keep)
        # Runs that ended before those hooks get them from the workers' recovery pass.
        register_run_end_backlog(runs_without_plan_cases)
