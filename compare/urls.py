from django.urls import path

from compare import views

app_name = "compare"
urlpatterns = [
    path("", views.compare_page, name="index"),
]
