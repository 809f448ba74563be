"""Where a Terminal-Bench task runs (issue 37 item 5): a self-written task (``local_compatible``)
in the bubblewrap sandbox (runs/engine/terminal.py), an official one in its own image by the
container engine that answers here (runs/engine/container_session.py). Both sessions have the
same interface: ``run_command``, ``verify``, ``close`` and the context manager."""

from __future__ import annotations

from typing import Any

from runs.engine.container_session import ContainerSession, container_session_start
from runs.engine.sandbox_command import SandboxLimits
from runs.engine.terminal import TERMINAL_LIMITS, TerminalSession, terminal_session_start

__all__ = ["terminal_session_open"]


def terminal_session_open(
    task_payload: dict[str, Any],
    secret: dict[str, Any],
    *,
    limits: SandboxLimits = TERMINAL_LIMITS,
) -> TerminalSession | ContainerSession:
    """The task's session, in the sandbox or in its image (see the module docstring). Raises
    TerminalTaskError when it cannot start here."""
    if (task_payload.get("environment") or {}).get("local_compatible", False):
        return terminal_session_start(task_payload, secret, limits=limits)
    return container_session_start(task_payload, secret, limits=limits)
