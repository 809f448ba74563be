from django.apps import AppConfig


class RecipesConfig(AppConfig):
    name = "recipes"

    def ready(self) -> None:
        # runs never imports recipes (issue 24): recipes plugs its capture into the run start
        # and its availability into the run page's Recipe tab.
        from recipes.selectors import run_recipe_availability
        from recipes.services import run_recipes_capture
        from runs.ledger.hooks import register_run_start_hook, register_run_tab

        register_run_start_hook(run_recipes_capture)
        register_run_tab(
            "recipe", lambda request, run: {"availability": run_recipe_availability(run=run)}
        )
