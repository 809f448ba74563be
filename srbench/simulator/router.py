"""Deterministic MoM routing: the first decision whose rules all hold wins, else the default.

Rules: ``keywords`` (any keyword occurs in the lower-cased last user message),
``session_percent`` (the session's stable bucket 0-99, from sha256 of router, decision and
session id, is below it; never matches without a session) and ``domains`` (the router's domain
classifier puts the prompt in one of them; see :func:`classify`). A decision with no rule always
matches. The chat endpoint and the routing preview call the same function, so a preview
predicts the served model exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from srbench.simulator.config import RouterSpec
from srbench.simulator.oracle import prompt_sha256, stable_index, stable_unit


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


def classify(router: RouterSpec, prompt_text: str | None, domain: str | None) -> str | None:
    """The domain the router's classifier gives a prompt whose true domain is ``domain`` (the
    simulator knows it from the answer key, the way a real router's classifier was trained on
    labelled questions): right with ``classifier_accuracy``, else another of its domains, both
    fixed per prompt. A domain the classifier does not know, or no prompt, gives None."""
    if prompt_text is None or domain is None or domain not in router.classifier_domains:
        return None
    sha = prompt_sha256(prompt_text)
    if stable_unit("classify", router.name, sha) < router.classifier_accuracy:
        return domain
    others = [d for d in router.classifier_domains if d != domain]
    return others[stable_index(len(others), "misclassify", router.name, sha)] if others else domain


def route(
    router: RouterSpec,
    prompt_text: str | None,
    session_id: str | None,
    domain: str | None = None,
) -> Route:
    """``domain`` is the prompt's true domain, None when it has none the simulator knows."""
    text = (prompt_text or "").lower()
    classified = classify(router, prompt_text, domain) if router.classifier_domains else None
    for decision in router.decisions:
        signals: list[str] = []
        if decision.domains:
            if classified not in decision.domains:
                continue
            signals.append(f"domain:{classified}")
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
