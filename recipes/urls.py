from django.urls import path

from recipes import views

app_name = "recipes"
urlpatterns = [
    path("", views.recipe_list_page, name="list"),
    path("<int:pk>/", views.recipe_detail_page, name="detail"),
    path("<int:pk>/download/", views.recipe_download, name="download"),
    path("runs/<int:run_id>/", views.run_recipe_page, name="run"),
]
