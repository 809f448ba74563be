"""The τ³ harness on the self-authored library domain: tools over a private copy of the
database, the prompts for the agent and the user simulator, and the reward."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from datasets.benchmarks.tau3 import ADAPTER
from runs.engine.tau import (
    AGENT_GREETING,
    STOP_TOKENS,
    TauEnvironment,
    agent_system_prompt,
    agent_texts,
    assistant_message,
    first_user_message,
    is_conversation_end,
    tau_reward,
    tau_unavailable_reason,
    tool_message,
    user_simulator_messages,
)
from runs.engine.tau_tools import TauError
from srbench.simulator import oracle

DOMAINS = Path(__file__).resolve().parents[2] / "datasets" / "fixtures" / "tau3" / "domains"
TASKS = {q.payload["task_id"]: q for q in ADAPTER.load(DOMAINS)}


def gold_actions(task_id: str) -> list[dict[str, Any]]:
    return TASKS[task_id].secret["evaluation_criteria"]["actions"]


def replay(task_id: str, actions: list[dict[str, Any]] | None = None) -> TauEnvironment:
    """Send each action through call_tool as an agent would (arguments as a JSON string)."""
    env = TauEnvironment.from_payload(TASKS[task_id].payload)
    for action in gold_actions(task_id) if actions is None else actions:
        result = env.call_tool(action["name"], json.dumps(action["arguments"]))
        assert not result.startswith("Error"), result
    return env


def reward(task_id: str, env: TauEnvironment, outputs: list[str], **kw: Any) -> dict[str, Any]:
    q = TASKS[task_id]
    return tau_reward(
        payload=q.payload, secret=q.secret, environment=env, agent_outputs=outputs, **kw
    )


def test_gold_actions_and_required_outputs_give_reward_1():
    env = replay("renew_simple")
    assert env.db["loans"]["L-1"] == {
        "loan_id": "L-1",
        "member_id": "M-1002",
        "book_id": "B-310",
        "due": "2026-10-04",
        "renewed": True,
    }
    result = reward("renew_simple", env, ["Renewed. Your new due date is 2026-10-04."])
    assert result["reward"] == 1 and result["db_match"] and result["outputs_ok"]
    assert result["complete"] and result["detail"]["components"] == {
        "DB": True,
        "COMMUNICATE": True,
    }


def test_a_different_path_to_the_same_final_database_also_passes():
    env = TauEnvironment.from_payload(TASKS["renew_simple"].payload)
    env.call_tool("search_books", '{"title": "winter"}')
    env.call_tool("renew_loan", '{"loan_id": "L-1"}')
    assert reward("renew_simple", env, ["New due date: 2026-10-04"])["reward"] == 1


def test_a_wrong_write_gives_reward_0():
    env = replay("renew_overdue")
    # Not the task's action: renewing someone's loan that nobody asked about.
    assert not env.call_tool("renew_loan", '{"loan_id": "L-1"}').startswith("Error")
    result = reward("renew_overdue", env, ["You owe 2.00."])
    assert result["reward"] == 0 and not result["db_match"] and result["outputs_ok"]


def test_a_missing_required_output_gives_reward_0():
    env = replay("renew_simple")
    result = reward("renew_simple", env, ["Your loan is renewed."])
    assert result["reward"] == 0 and result["db_match"] and not result["outputs_ok"]
    assert result["detail"]["missing_info"] == ["2026-10-04"]


def test_required_outputs_match_case_and_commas_insensitively():
    q = TASKS["renew_overdue"]
    secret = copy.deepcopy(q.secret)
    secret["evaluation_criteria"]["communicate_info"] = ["Fine of 1,000 Cents"]
    env = replay("renew_overdue")
    result = tau_reward(
        payload=q.payload, secret=secret, environment=env, agent_outputs=["a FINE OF 1000 cents"]
    )
    assert result["reward"] == 1


def test_a_step_limit_or_other_abnormal_end_gives_reward_0():
    env = replay("renew_simple")
    result = reward("renew_simple", env, ["2026-10-04"], termination="max_steps")
    assert result["reward"] == 0 and result["db_match"] and result["outputs_ok"]
    assert result["detail"]["reason"] == "episode ended by max_steps"


def test_nl_assertions_are_reported_not_evaluated_and_never_pass_silently():
    env = replay("hold_limit")
    result = reward("hold_limit", env, ["Members may hold at most three books."])
    assert result["db_match"] and result["reward"] == 0 and result["complete"] is False
    assert result["detail"]["components"]["NL_ASSERTION"] == "not evaluated"
    assert result["detail"]["not_evaluated"] == {
        "NL_ASSERTION": ["The agent explains that members may hold at most three books."]
    }


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("renew_loan", "{not json", "not valid JSON"),
        ("renew_loan", "[1, 2]", "must be a JSON object"),
        ("renew_loan", "{}", "missing required argument(s) loan_id"),
        ("renew_loan", '{"loan_id": 7}', "loan_id must be of type string"),
        ("renew_loan", '{"loan_id": "L-1", "days": 30}', "unexpected argument(s) days"),
        ("renew_loan", '{"loan_id": "L-99"}', "loan L-99 not found"),
        ("renew_loan", '{"loan_id": "L-3"}', "overdue"),
        ("place_hold", '{"member_id": "M-1003", "book_id": "B-310"}', "already holds 3"),
        ("place_hold", '{"member_id": "M-1001", "book_id": "B-311"}', "available on the shelf"),
        ("delete_everything", "{}", "unknown tool 'delete_everything'"),
    ],
)
def test_bad_calls_return_an_error_string_and_change_nothing(name, arguments, error):
    env = TauEnvironment.from_payload(TASKS["renew_simple"].payload)
    before = copy.deepcopy(env.db)
    result = env.call_tool(name, arguments)
    assert result.startswith("Error: ") and error in result
    assert env.db == before and env.calls[-1].ok is False


def test_the_payload_database_is_never_mutated():
    payload = TASKS["renew_simple"].payload
    before = copy.deepcopy(payload["db"])
    env = replay("renew_simple")
    env.call_tool("place_hold", '{"member_id": "M-1001", "book_id": "B-310"}')
    reward("renew_simple", env, [])
    assert payload["db"] == before
    # And a second attempt starts from the original.
    assert TauEnvironment.from_payload(payload).db["loans"]["L-1"]["due"] == "2026-09-20"


def test_tool_schemas_are_openai_function_tools():
    env = TauEnvironment.from_payload(TASKS["renew_simple"].payload)
    schemas = env.tool_schemas()
    names = [s["function"]["name"] for s in schemas]
    assert {"get_member", "renew_loan", "place_hold", "transfer_to_human_agents"} <= set(names)
    for schema in schemas:
        assert schema["type"] == "function"
        params = schema["function"]["parameters"]
        assert params["type"] == "object" and params["required"] == list(params["properties"])
    json.dumps(schemas)  # the request body must serialise


def test_initial_state_data_and_actions_are_applied_to_the_private_copy():
    payload = copy.deepcopy(TASKS["renew_simple"].payload)
    payload["initial_state"] = {
        "initialization_data": {
            "agent_data": {
                "loans": {"L-3": {"due": "2026-09-30"}},
                "books": {"B-204": {"holds": []}},
            }
        },
        "initialization_actions": [
            {"env_type": "assistant", "func_name": "renew_loan", "arguments": {"loan_id": "L-3"}}
        ],
    }
    env = TauEnvironment.from_payload(payload)
    assert env.db["loans"]["L-3"]["due"] == "2026-10-14" and env.db["loans"]["L-3"]["renewed"]
    assert env.calls == []  # set-up is not the agent's doing
    assert TASKS["renew_simple"].payload["db"]["loans"]["L-3"]["due"] == "2026-09-10"
    # L-4 was renewed already in the fixture: an initialisation that fails is a task error.
    payload["initial_state"]["initialization_actions"][0]["arguments"] = {"loan_id": "L-4"}
    with pytest.raises(TauError, match="already been renewed"):
        TauEnvironment.from_payload(payload)


def test_an_unknown_domain_is_a_task_error():
    payload = TASKS["renew_simple"].payload | {"domain": "retail"}
    with pytest.raises(TauError, match="'retail' is not available here: no local tools"):
        TauEnvironment.from_payload(payload)
    assert "no local tools" in tau_unavailable_reason(payload)
    assert tau_unavailable_reason(TASKS["renew_simple"].payload) is None


def test_prompts_come_from_the_adapter_and_the_scenario():
    payload = TASKS["renew_simple"].payload
    assert "lending-desk" in agent_system_prompt(payload)
    assert first_user_message(payload) == ADAPTER.messages(payload)[1]["content"]


def test_user_simulator_sees_the_scenario_and_the_agent_text_with_roles_flipped():
    payload = TASKS["renew_simple"].payload
    conversation = [
        {"role": "system", "content": agent_system_prompt(payload)},
        {"role": "user", "content": first_user_message(payload)},
        assistant_message(
            None, [{"id": "c1", "name": "get_member", "arguments": '{"member_id":"M-1002"}'}]
        ),
        tool_message("c1", '{"member_id": "M-1002"}'),
        assistant_message("Could I have your member id and surname?"),
    ]
    messages = user_simulator_messages(payload, conversation)
    system = messages[0]["content"]
    assert messages[0]["role"] == "system"
    assert oracle.SCENARIO_HEADING in system and "M-1002" in system and "Varga" in system
    assert "lending-desk" not in system  # the user never sees the agent's policy
    assert [(m["role"], m["content"]) for m in messages[1:]] == [
        ("user", AGENT_GREETING),
        ("assistant", first_user_message(payload)),
        ("user", "Could I have your member id and surname?"),
    ]
    # The simulated user picks the scenario sentence that answers the question.
    reply = oracle.user_reply(messages, stop_after_turns=5)
    assert reply == "My member id is M-1002 and my surname is Varga."


def test_conversation_end_markers():
    assert all(is_conversation_end(f"Thanks. {token}") for token in STOP_TOKENS)
    assert not is_conversation_end("Thanks, bye") and not is_conversation_end(None)


def test_agent_texts_skip_tool_only_turns():
    conversation = [
        {"role": "user", "content": "hi"},
        assistant_message(None, [{"id": "c", "name": "get_member", "arguments": "{}"}]),
        tool_message("c", "Error: x"),
        assistant_message("Done: 2026-10-04"),
    ]
    assert agent_texts(conversation) == ["Done: 2026-10-04"]


@pytest.mark.django_db
def test_tau3_tasks_that_cannot_run_here_are_left_out_of_the_plan_with_the_reason():
    """Issue 22 points 2–3 (R4): a τ³ domain without local tools, or a database this machine
    does not hold, is "not available here" at plan time — never a failed or wrong cell."""
    from datasets.models import DatasetQuestion
    from runs.planning.plans import PlanError, plan_freeze
    from tests import factories as f

    def plan_for(payloads: list[dict[str, Any]]) -> dict[str, Any]:
        dataset = f.dataset_create(selection={"benchmarks": ["tau3"]})
        for i, payload in enumerate(payloads):
            q = f.question_create(benchmark="tau3", payload=payload)
            DatasetQuestion.objects.create(dataset=dataset, question=q, position=i)
        return {
            "name": "tau",
            "dataset": dataset.pk,
            "targets": [subject.slug],
            "simulators": {"tau3": user.slug},
        }

    subject, user = f.target_create(), f.target_create()
    good = TASKS["renew_simple"].payload
    retail = good | {"domain": "retail"}
    unknown_db = good | {"domain": "airline", "db_sha256": "0" * 64}
    unknown_db.pop("db", None)

    manifest = plan_freeze(data=plan_for([good, retail, retail, unknown_db])).manifest
    assert manifest["benchmarks"]["tau3"]["cases"] == 1
    reasons = {e["reason"]: e["questions"] for e in manifest["not_run"]}
    assert reasons == {
        next(r for r in reasons if "'retail' is not available here" in r): 2,
        next(r for r in reasons if "'airline' is not available here: no installed copy" in r): 1,
    }
    with pytest.raises(PlanError, match="no question that can run here"):
        plan_freeze(data=plan_for([retail]))
