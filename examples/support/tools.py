"""Four local tools for the support example: read a ticket, look up an order, issue a refund, send a reply.

The tickets and orders are JSON files shipped with the example
(``tickets.json``, ``orders.json``; SUPPORT_TICKETS and SUPPORT_ORDERS name
others). The two side effects write to ``$SUPPORT_STATE_DIR`` (default
``.support-demo``): ``refunds.jsonl`` holds every refund issued,
``outbox.jsonl`` every reply sent. Both tools require approval: a step that
calls one waits for a person (or ``--yes``), and a denial means the tool
never runs.

What each tool declares is what the contract reads:

- ``read_ticket`` is read-only and its output is untrusted: a ticket is the
  customer's text, and anyone can write anything in it (ticket T-1042 carries
  an injected instruction to refund $5,000 to another account).
- ``lookup_order`` is read-only and trusted: the shop's own records.
- ``issue_refund`` changes things; ``order_id``, ``amount`` and ``account``
  choose where money goes (sensitive), ``note`` is free text.
- ``send_reply`` changes things; ``to`` chooses where the text goes.

    planexec run --plan examples/support/plan.json --tools examples/support/tools.py --model ... --yes
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field

from planexec import tool

HERE = Path(__file__).parent
TicketId = Annotated[str, Field(pattern=r"^T-\d{3,6}$", description="a ticket id, e.g. T-1042")]
OrderId = Annotated[str, Field(pattern=r"^A-\d{3,6}$", description="an order id, e.g. A-7731")]


class Ticket(BaseModel):
    ticket_id: str
    customer_email: str
    subject: str
    body: str


class Order(BaseModel):
    order_id: str
    customer: str
    email: str
    item: str
    total: float
    currency: str
    payment_account: str
    status: str


class Refund(BaseModel):
    refund_id: str
    order_id: str
    amount: float
    account: str
    note: str
    issued_at: str


class Sent(BaseModel):
    message_id: str
    to: str
    subject: str
    sent_at: str


def _state() -> Path:
    state = Path(os.environ.get("SUPPORT_STATE_DIR", ".support-demo"))
    state.mkdir(parents=True, exist_ok=True)
    return state


def _records(kind: str) -> list[dict[str, Any]]:
    """What the side effects wrote so far: ``refunds`` or ``outbox``."""
    path = _state() / f"{kind}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _append(kind: str, record: BaseModel) -> None:
    with open(_state() / f"{kind}.jsonl", "a") as f:
        f.write(record.model_dump_json() + "\n")


def _table(variable: str, default: str, key: str) -> dict[str, Any]:
    """The entry `key` of a JSON file of records; a ValueError naming the file and the key when it is not there."""
    path = Path(os.environ.get(variable) or HERE / default)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"the file {str(path)!r} does not exist ({variable} names it)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"the file {str(path)!r} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise ValueError(f"the file {str(path)!r} must hold an object of records by id")
    if key not in data:
        raise ValueError(f"no {key!r} in {path.name}; it has {', '.join(sorted(data)) or 'nothing'}")
    entry: dict[str, Any] = data[key]
    return entry


@tool(worker="helpdesk", read_only=True)
def read_ticket(ticket_id: TicketId) -> Ticket:
    """A support ticket: who wrote it, its subject and its text (the customer's words: untrusted)."""
    return Ticket.model_validate(_table("SUPPORT_TICKETS", "tickets.json", ticket_id))


@tool(worker="orders", read_only=True, untrusted_output=False)
def lookup_order(order_id: OrderId) -> Order:
    """An order from the shop's own records: the customer, the item, the total and the card it was paid with."""
    return Order.model_validate(_table("SUPPORT_ORDERS", "orders.json", order_id))


@tool(worker="billing", requires_approval=True, untrusted_output=False, sensitive=("order_id", "amount", "account"), free_text=("note",))
def issue_refund(order_id: OrderId, amount: Annotated[float, Field(gt=0)], account: str, note: str = "") -> Refund:
    """Refund `amount` of an order to `account`; never more than the order's total, only to the card it was paid with."""
    order = Order.model_validate(_table("SUPPORT_ORDERS", "orders.json", order_id))
    if account != order.payment_account:
        raise ValueError(f"order {order_id} was paid with {order.payment_account}, not {account}: a refund goes back there")
    refunded = sum(r["amount"] for r in _records("refunds") if r["order_id"] == order_id)
    if amount + refunded > order.total + 1e-9:
        raise ValueError(f"order {order_id} totals {order.total:.2f}; {refunded:.2f} is refunded already, {amount:.2f} more is too much")
    refund = Refund(
        refund_id=f"R-{order_id}-{len(_records('refunds')) + 1}",
        order_id=order_id,
        amount=amount,
        account=account,
        note=note,
        issued_at=datetime.now(UTC).isoformat(),
    )
    _append("refunds", refund)
    return refund


@tool(worker="helpdesk", requires_approval=True, untrusted_output=False)
def send_reply(to: str, subject: str, body: str) -> Sent:
    """Email a reply to a customer (the outbox of the demo: a file)."""
    sent = Sent(message_id=f"M-{len(_records('outbox')) + 1}", to=to, subject=subject, sent_at=datetime.now(UTC).isoformat())
    with open(_state() / "outbox.jsonl", "a") as f:
        f.write(json.dumps({**sent.model_dump(), "body": body}) + "\n")
    return sent
