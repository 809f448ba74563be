"""The web process freezes what it holds once Django is set up (srbench/web_gc.py, issue 38):
checked in a fresh interpreter that loads the ASGI entry point, as uvicorn does, so this suite's
own process is left as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json, sys
import srbench.asgi
frozen = gc.get_freeze_count()
views = "compare.views" in sys.modules
cycle = []
cycle.append(cycle)
del cycle
print(json.dumps({"frozen": frozen, "views": views, "collected": gc.collect()}))
"""


def test_the_asgi_entry_point_freezes_django_and_the_views_and_cycles_are_still_collected():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "srbench.settings_test"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True, env=env
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["views"]  # the URLconf (and so every view module) was imported before the freeze
    assert seen["frozen"] > 50_000  # Django, the apps and the views: ~130,000 objects
    assert seen["collected"] >= 1  # what requests make is still collected
