from django.apps import AppConfig


class SrbenchConfig(AppConfig):
    name = "srbench"
    verbose_name = "srbench core"
