#!/usr/bin/env python
import os
import sys


def main() -> None:
    # `manage.py benchmark … | head -1`: quiet when the reader goes away (srbench/cli/pipe.py).
    from srbench.cli.pipe import reader_gone_quietly

    reader_gone_quietly(_main)


def _main() -> None:
    if sys.argv[1:2] == ["benchmark"]:
        # A verb that only talks to a server (--url or SRBENCH_URL) runs without booting
        # Django, as the `srbench` console script's does (srbench/cli/remote.py).
        from srbench.cli.remote import remote_exit

        remote_exit(sys.argv[2:], prog=f"{os.path.basename(sys.argv[0])} benchmark")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
