from django.urls import path

from runs.interfaces import views, views_evaluation, views_questions

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("runs/new/", views_evaluation.evaluation_new, name="new"),
    path("runs/<int:run_id>/", views.run_detail, name="detail"),
    path("runs/<int:run_id>/recovery/", views.run_recovery, name="recovery"),
    path("runs/<int:run_id>/cancel/", views.run_cancel_view, name="cancel"),
    path("runs/<int:run_id>/calls/<int:call_id>/", views.run_call, name="call"),
    path("runs/<int:run_id>/questions/<int:cell_id>/", views.run_question, name="question"),
    path("runs/<int:run_id>/side-by-side/", views_questions.run_side_by_side, name="side_by_side"),
    path(
        "runs/<int:run_id>/questions/<int:cell_id>/transcript/",
        views_questions.run_transcript,
        name="transcript",
    ),
    path("targets/", views.target_list, name="targets"),
]
