"""The `srbench` console script: `srbench <verb> …` is `manage.py benchmark <verb> …`.

A verb that only talks to a server (`--url` or SRBENCH_URL) runs without booting Django
(`srbench.cli.remote`): the same parser and handler, a tenth of the start-up.
"""

import os
import sys


def main() -> None:
    from srbench.cli.pipe import reader_gone_quietly

    reader_gone_quietly(_main)


def _main() -> None:
    argv = sys.argv[1:]
    from srbench.cli.remote import remote_exit

    remote_exit(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line([sys.argv[0], "benchmark", *argv])
