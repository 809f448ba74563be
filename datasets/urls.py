from django.urls import path

from datasets import views

app_name = "datasets"
urlpatterns = [
    path("", views.dataset_list_page, name="list"),
    path("<int:pk>/", views.dataset_detail_page, name="detail"),
    path("<int:pk>/questions/<int:question_id>/", views.question_detail_page, name="question"),
]
