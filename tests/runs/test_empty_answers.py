"""Empty answers are counted and said per target (R3, R10.2): a completed subject call with no
content (white space at most), no reasoning and no tool call is graded as given, and the
report says how many there were and what that may mean. Seen on a real stack (LiteLLM before
llama.cpp's server, tests/real/test_llama_long_prompts.py): the server's refusal of a prompt
past its context window came back from the gateway as a finished empty answer, finish_reason
"stop", no usage — graded wrong with nothing in the report to say why."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from runs.reporting.report import empty_answers_note, run_report
from tests import factories as f
from tests.compare import builders as b

ANSWERED = {"content": "The answer is B"}


def bench(capsys, *args: str) -> str:
    capsys.readouterr()
    f.user_create(username="ops", staff=True)
    call_command("benchmark", *args, "--user", "ops")
    return capsys.readouterr()[0]


# (call fields, the cell's outcome: True/False graded, None failed)
CASES = [
    ({"content": ""}, False),  # empty
    ({"content": " \n\t"}, False),  # white space only: empty
    ({"content": "", "reasoning": "thinking"}, False),  # reasoned, said nothing: not empty
    ({"content": "", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]}, False),
    (ANSWERED, True),
    # A completed call of a failed cell: the cell is not graded (outside probe jf).
    ({"content": ""}, None),
    # Cut by the token limit: a cut answer, graded as truncated.
    ({"content": "", "finish_reason": "length"}, False),
    # Hidden reasoning that used the tokens: not nothing.
    ({"content": "", "reasoning_tokens": 4096, "output_tokens": 4096}, False),
]


def counted_independently() -> int:
    return sum(
        1
        for fields, outcome in CASES
        if outcome is not None
        and not fields["content"].strip()
        and not fields.get("reasoning")
        and not fields.get("tool_calls")
        and fields.get("finish_reason", "stop") != "length"
        and not fields.get("reasoning_tokens")
    )


@pytest.mark.django_db
def test_empty_answers_are_counted_and_said_on_the_report_page_and_cli(client, capsys):
    qs = b.questions({"mmlu-pro": len(CASES)})
    t = b.target("gw-small")
    r = b.run(qs, {t: [outcome for _, outcome in CASES]}, call_fields={t: [c for c, _ in CASES]})

    target = run_report(run=r)["targets"][0]

    assert counted_independently() == 2
    assert target["empty_answers"] == counted_independently()
    assert target["empty_answers_note"] == empty_answers_note(2)
    assert target["empty_answers_note"].startswith(
        "2 completed subject calls came back empty (no content, no reasoning, no tool call) "
        "and were graded as given; a gateway answers so when the server behind it refused"
    )
    client.force_login(r.owner)
    page = client.get(f"/runs/{r.pk}/").content.decode()
    assert 'id="empty-answers-gw-small"' in page
    assert "2 completed subject calls came back empty" in page
    assert "answers: 2 completed subject calls came back empty" in bench(
        capsys, "report", str(r.pk)
    )


@pytest.mark.django_db
def test_no_empty_answer_says_nothing(client):
    qs = b.questions({"mmlu-pro": 2})
    t = b.target("answers")
    r = b.run(qs, {t: [True, False]}, call_fields={t: ANSWERED})
    target = run_report(run=r)["targets"][0]
    assert (target["empty_answers"], target["empty_answers_note"]) == (0, None)
    client.force_login(r.owner)
    assert 'id="empty-answers-' not in client.get(f"/runs/{r.pk}/").content.decode()
