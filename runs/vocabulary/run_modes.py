"""A run's modes (R8, issue 21): ``live`` answers every case; ``preview`` sends each case to a
MoM target's routing preview instead (no model call). The one vocabulary of `Run.Mode`, the
plan's ``mode`` and the API schema's enums (srbench/settings.py, which cannot import models).
Plain Python (no Django).
"""

from __future__ import annotations

from enum import StrEnum


class RunMode(StrEnum):
    LIVE = "live"
    PREVIEW = "preview"
