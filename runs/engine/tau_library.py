"""The self-authored τ³ ``library`` domain: its tools as functions over the task's database
dict (benchmarks.md §9). Its clock is in the data, so a replay on any day is the same."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from runs.engine.tau_tools import Domain, Tool, ToolError, merge_dict_state, string_param

LIBRARY_HOLD_LIMIT = 3
LIBRARY_RENEWAL_DAYS = 14
LIBRARY_FINE_PER_DAY_CENTS = 25


def _record(db: dict[str, Any], table: str, key: str, what: str) -> dict[str, Any]:
    row = db.get(table, {}).get(key)
    if row is None:
        raise ToolError(f"{what} {key} not found")
    return row


def _today(db: dict[str, Any]) -> dt.date:
    # The domain's clock is in the data, so a replay on any day gives the same database.
    return dt.date.fromisoformat(db["today"])


def _loans_of(db: dict[str, Any], member_id: str) -> list[dict[str, Any]]:
    loans = []
    for loan in db.get("loans", {}).values():
        if loan["member_id"] == member_id:
            book = db["books"].get(loan["book_id"], {})
            loans.append(loan | {"title": book.get("title")})
    return loans


def library_get_member(db: dict[str, Any], member_id: str) -> dict[str, Any]:
    member = _record(db, "members", member_id, "member")
    return copy.deepcopy(member) | {"loans": _loans_of(db, member_id)}


def library_get_book(db: dict[str, Any], book_id: str) -> dict[str, Any]:
    return copy.deepcopy(_record(db, "books", book_id, "book"))


def library_search_books(db: dict[str, Any], title: str) -> list[dict[str, Any]]:
    needle = title.strip().lower()
    if not needle:
        raise ToolError("title must not be empty")
    return [
        copy.deepcopy(book)
        for book in db.get("books", {}).values()
        if needle in str(book.get("title", "")).lower()
    ]


def _days_overdue(db: dict[str, Any], loan: dict[str, Any]) -> int:
    return max(0, (_today(db) - dt.date.fromisoformat(loan["due"])).days)


def library_get_fine(db: dict[str, Any], loan_id: str) -> dict[str, Any]:
    loan = _record(db, "loans", loan_id, "loan")
    days = _days_overdue(db, loan)
    cents = days * LIBRARY_FINE_PER_DAY_CENTS
    return {"loan_id": loan_id, "days_overdue": days, "fine": f"{cents // 100}.{cents % 100:02d}"}


def library_renew_loan(db: dict[str, Any], loan_id: str) -> dict[str, Any]:
    loan = _record(db, "loans", loan_id, "loan")
    if loan["renewed"]:
        raise ToolError(f"loan {loan_id} has already been renewed once")
    if _days_overdue(db, loan) > 0:
        raise ToolError(f"loan {loan_id} is overdue and cannot be renewed")
    book = _record(db, "books", loan["book_id"], "book")
    if any(holder != loan["member_id"] for holder in book.get("holds", [])):
        raise ToolError(f"book {book['book_id']} is held by another member")
    due = dt.date.fromisoformat(loan["due"]) + dt.timedelta(days=LIBRARY_RENEWAL_DAYS)
    loan["due"] = due.isoformat()
    loan["renewed"] = True
    return copy.deepcopy(loan)


def library_place_hold(db: dict[str, Any], member_id: str, book_id: str) -> dict[str, Any]:
    member = _record(db, "members", member_id, "member")
    book = _record(db, "books", book_id, "book")
    if book_id in member["holds"]:
        raise ToolError(f"member {member_id} already holds book {book_id}")
    if len(member["holds"]) >= LIBRARY_HOLD_LIMIT:
        raise ToolError(f"member {member_id} already holds {LIBRARY_HOLD_LIMIT} books")
    if book["status"] != "on_loan":
        raise ToolError(f"book {book_id} is available on the shelf; it cannot be held")
    if any(
        loan["member_id"] == member_id and loan["book_id"] == book_id
        for loan in db.get("loans", {}).values()
    ):
        raise ToolError(f"book {book_id} is on loan to member {member_id}")
    member["holds"].append(book_id)
    book["holds"].append(member_id)
    return {"member_id": member_id, "book_id": book_id, "member_holds": list(member["holds"])}


def transfer_to_human_agents(db: dict[str, Any], summary: str) -> str:
    # As in τ², a transfer changes nothing; the user simulator ends with ###TRANSFER###.
    return "Transfer successful"


LIBRARY_TOOLS: tuple[Tool, ...] = (
    Tool(
        "get_member",
        "Look up a member by id: name, surname, the books they hold and their current loans.",
        {"member_id": string_param("The member id, such as 'M-1001'.")},
        library_get_member,
        writes=False,
    ),
    Tool(
        "get_book",
        "Look up a book by id: title, status (available or on_loan) and the members holding it.",
        {"book_id": string_param("The book id, such as 'B-101'.")},
        library_get_book,
        writes=False,
    ),
    Tool(
        "search_books",
        "Find books whose title contains the given text (case-insensitive).",
        {"title": string_param("Part of the title.")},
        library_search_books,
        writes=False,
    ),
    Tool(
        "get_fine",
        "Days overdue and the fine owed on a loan.",
        {"loan_id": string_param("The loan id, such as 'L-1'.")},
        library_get_fine,
        writes=False,
    ),
    Tool(
        "renew_loan",
        "Renew a loan once for 14 days. Fails if it was renewed before, is overdue, or another "
        "member holds the book.",
        {"loan_id": string_param("The loan id, such as 'L-1'.")},
        library_renew_loan,
        writes=True,
    ),
    Tool(
        "place_hold",
        "Place a hold for a member on a book that is on loan to someone else.",
        {
            "member_id": string_param("The member id."),
            "book_id": string_param("The book id."),
        },
        library_place_hold,
        writes=True,
    ),
    Tool(
        "transfer_to_human_agents",
        "Transfer the member to a human agent, with a summary of their issue. Only when the "
        "request is outside what the policy lets you do.",
        {"summary": string_param("A short summary of the member's issue.")},
        transfer_to_human_agents,
        writes=False,
    ),
)


LIBRARY_DOMAIN = Domain("library", LIBRARY_TOOLS, merge=merge_dict_state)
