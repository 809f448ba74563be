"""A recovery plan's modes (SPEC R12, runs/settlement/recovery.py): the one vocabulary of the plan, the
API, the page and the CLI (issue 36 item 3).

A RecoveryRequest stores each of them as it is (its ``Mode`` choices and check constraint;
``judge_only``, issue 34, was stored as ``undispatched`` before migration 0023). Plain
Python (no Django), so the remote CLI (srbench/cli/remote.py) may import it without booting
Django.
"""

from __future__ import annotations

from enum import StrEnum


class RecoveryPlanMode(StrEnum):
    UNDISPATCHED = "undispatched"
    FAILED = "failed"
    JUDGE_ONLY = "judge_only"
