"""Deterministic MoM routing: the first decision whose rules all hold wins, else the default.

Rules: ``keywords`` (any keyword occurs in the lower-cased last user message) and
``session_percent`` (the session's stable bucket 0-99, from sha256 of router, decision and
session id, is below it; never matches without a session). A decision with no rule always
matches. The chat endpoint and the routing preview call the same function, so a preview
predicts the served model exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from srbench.simulator.config import RouterSpec
from srbench.simulator.oracle import stable_index


@dataclass(frozen=True)
class Route:
    decision: str
    models: tuple[str, ...]
    method: str
    matched_signals: tuple[str, ...]
    reason: str

    @property
    def served_model(self) -> str:
        return self.models[-1]


def session_bucket(router: str, decision: str, session_id: str) -> int:
    return stable_index(100, "session", router, decision, session_id)


def route(router: RouterSpec, prompt_text: str | None, session_id: str | None) -> Route:
    text = (prompt_text or "").lower()
    for decision in router.decisions:
        signals: list[str] = []
        if decision.keywords:
            hits = [k for k in decision.keywords if k in text]
            if not hits:
                continue
            signals.extend(f"keyword:{k}" for k in hits)
        if decision.session_percent is not None:
            if not session_id:
                continue
            bucket = session_bucket(router.name, decision.name, session_id)
            if bucket >= decision.session_percent:
                continue
            signals.append(f"session_bucket:{bucket}")
        method = "fanout" if len(decision.models) > 1 else "static"
        return Route(
            decision=decision.name,
            models=decision.models,
            method=method,
            matched_signals=tuple(signals),
            reason=f"decision {decision.name} matched"
            + (f" on {', '.join(signals)}" if signals else ""),
        )
    return Route(
        decision=router.default_decision,
        models=(router.default_model,),
        method="default",
        matched_signals=(),
        reason="no decision matched; default model",
    )
