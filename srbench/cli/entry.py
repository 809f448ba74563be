"""The `srbench` console script: `srbench <verb> …` is `manage.py benchmark <verb> …`."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line([sys.argv[0], "benchmark", *sys.argv[1:]])
