from django.contrib import admin

from recipes.models import Recipe
from srbench.admin_base import ViewOnlyAdmin


@admin.register(Recipe)
class RecipeAdmin(ViewOnlyAdmin):
    list_display = ["run", "target", "captured_at", "projection_sha256"]
