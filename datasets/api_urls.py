from rest_framework.routers import SimpleRouter

from datasets.api import DatasetViewSet, QuestionViewSet, SourceViewSet

# SimpleRouter: the project router in srbench/urls.py already serves the /api/v1/ root view.
router = SimpleRouter()
router.register("sources", SourceViewSet, basename="source")
router.register("datasets", DatasetViewSet, basename="dataset")
router.register("questions", QuestionViewSet, basename="question")

urlpatterns = router.urls
