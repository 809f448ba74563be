from rest_framework import viewsets

from runs.models import Run, Target
from runs.serializers import RunSerializer, TargetSerializer


class TargetViewSet(viewsets.ReadOnlyModelViewSet):
    """Registered targets (read-only for everyone; operators edit them in the admin)."""

    queryset = Target.objects.all()
    serializer_class = TargetSerializer
    lookup_field = "slug"


class RunViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Run.objects.all()
    serializer_class = RunSerializer
