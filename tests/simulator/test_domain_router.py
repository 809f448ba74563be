"""The domain router and per-domain accuracy the demo's headline stands on (issue 35, "a router
that behaves like a real one"): a classifier puts each prompt in one of MMLU-Pro's domains
(right with its configured accuracy, fixed per prompt), calculation-heavy domains go to the
strong model, the rest to the cheap one; the cheap model's accuracy depends on the domain.
Everything over real HTTP against the bundled config, with counts computed here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from srbench.simulator.config import DEFAULT_CONFIG_PATH, ConfigError, load_config
from srbench.simulator.oracle import AnswerKey
from srbench.simulator.router import classify, route
from srbench.simulator.testing import running_simulator
from tests.simulator.conftest import FAST, chat_body

STEM = ("chemistry", "computer science", "engineering", "math", "physics")
OTHERS = ("biology", "business", "economics", "health", "history", "law", "other")
PER_DOMAIN = 150


def prompt(domain: str, i: int) -> str:
    return f"A question about {domain} #{i}?\nA) 1\nB) 2\nC) 3\nD) 4"


def key() -> AnswerKey:
    k = AnswerKey()
    for domain in STEM + OTHERS:
        for i in range(PER_DOMAIN):
            k.add(
                prompt(domain, i),
                "mmlu-pro",
                "mcq",
                {"answer": "C"},
                {"options": ["1", "2", "3", "4"], "category": domain},
            )
    return k


@pytest.fixture(scope="module")
def sim() -> Iterator[httpx.Client]:
    with (
        running_simulator(answer_key=key(), **FAST) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        yield client


def ask(sim: httpx.Client, model: str, text: str) -> httpx.Response:
    response = sim.post("/v1/chat/completions", json=chat_body(model, text, stream=False))
    assert response.status_code == 200, response.text
    return response


def test_the_router_sends_calculation_domains_to_the_strong_model_as_its_classifier_says(sim):
    config = load_config(DEFAULT_CONFIG_PATH)
    router = config.routers["mom-by-domain"]
    served: Counter[tuple[bool, str]] = Counter()
    misclassified = 0
    for domain in STEM + OTHERS:
        for i in range(0, PER_DOMAIN, 3):
            text = prompt(domain, i)
            response = ask(sim, "mom-by-domain", text)
            model = response.headers["x-vsr-selected-model"]
            served[(domain in STEM, model)] += 1
            # The served model follows the classified domain, whatever the true one.
            seen = classify(router, text, domain)
            misclassified += seen != domain
            assert model == ("sim-strong" if seen in STEM else "sim-weak"), (domain, seen)
            # The preview predicts the chat endpoint exactly.
            preview = sim.post(
                "/api/v1/routing/preview",
                json={"model": "mom-by-domain", "messages": [{"role": "user", "content": text}]},
            ).json()
            assert preview["selected_model"] == model
    asked = sum(served.values())
    # 5 % misclassified in expectation: 60 of 1,200 prompts; far from 0 and far from half.
    assert 20 <= misclassified <= 110, misclassified
    assert served[(True, "sim-strong")] > 0.9 * (
        served[(True, "sim-strong")] + served[(True, "sim-weak")]
    )
    assert served[(False, "sim-weak")] > 0.9 * (
        served[(False, "sim-weak")] + served[(False, "sim-strong")]
    )
    assert asked == len(STEM + OTHERS) * len(range(0, PER_DOMAIN, 3))


def test_a_prompt_without_a_known_domain_takes_the_default_and_proofs_the_strong_model(sim):
    assert ask(sim, "mom-by-domain", "Hello there").headers["x-vsr-selected-model"] == "sim-weak"
    response = ask(sim, "mom-by-domain", "Please prove that 2+2=4.")
    assert response.headers["x-vsr-selected-model"] == "sim-strong"
    assert response.headers["x-vsr-selected-decision"] == "proof"


def test_the_cheap_model_is_right_by_domain_and_the_strong_one_everywhere(sim):
    """Accuracy per domain measured over real answers: sim-weak 0.89 on the knowledge domains
    and 0.35 on the calculation ones (default.toml), sim-strong 0.9 on both."""
    rate: dict[tuple[str, bool], float] = {}
    for model in ("sim-weak", "sim-strong"):
        for stem, domains in ((True, STEM), (False, OTHERS)):
            right = total = 0
            for domain in domains:
                for i in range(PER_DOMAIN):
                    body = ask(sim, model, prompt(domain, i)).json()
                    right += body["choices"][0]["message"]["content"].endswith("Answer: C")
                    total += 1
            rate[(model, stem)] = right / total
    # n ≥ 750 per cell: a binomial sd ≤ 0.018, so ±0.06 is more than three of them.
    assert abs(rate[("sim-weak", True)] - 0.35) < 0.06, rate
    assert abs(rate[("sim-weak", False)] - 0.89) < 0.06, rate
    assert abs(rate[("sim-strong", True)] - 0.9) < 0.06, rate
    assert abs(rate[("sim-strong", False)] - 0.9) < 0.06, rate


def test_a_decision_naming_a_domain_the_classifier_does_not_know_is_refused():
    with pytest.raises(ConfigError, match=r"decisions name domains the classifier does not know"):
        load_config(
            None,
            {
                "routers": {
                    "bad": {
                        "default_model": "sim-weak",
                        "classifier_domains": ["math"],
                        "decisions": [{"name": "x", "domains": ["poetry"], "model": "sim-strong"}],
                    }
                }
            },
        )
    config = load_config(DEFAULT_CONFIG_PATH)
    # Without a classifier a domain rule never matches: the router falls to its default.
    assert route(config.routers["auto"], "about math", None, "math").decision != "stem"
