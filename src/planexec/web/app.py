"""The console's routes: `create_app` builds the FastAPI application over one run store.

Owns the pages (runs, a run, the approvals inbox, the plan editor, start
work), the fragments the pages refresh themselves with, the live stream
of a run (server-sent events: the server polls `RunStore.events` after the
last seq it sent and pushes the run's and each step's state when something
new was stored, so it follows runs written by any process), the static
files, and the forms that change anything (decide an approval; answer a
waiting plan version with an edit; submit a goal or a template through the
team, `start.Submitter`), all behind `security.Guard`, with run ids in
addresses as `paths` writes them. A request takes a store kept open
between requests (`stores.StorePool`); handlers are plain functions
FastAPI runs in its thread pool, since the store's calls block. The
console runs no run itself: approved runs are taken from the store's
queue by its own worker (`fleet.local`, started with the console when
asked, stopped with it) or by a ``planexec worker`` fleet. Imports
`views`, `actions`, `start`, `security`, `paths`, `stores`, the store,
the fleet's local worker and the public API; never the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from sse_starlette.sse import EventSourceResponse

from planexec import Team
from planexec.errors import ApprovalError, PlanexecError, RunNotFoundError, StoreError, TamperedError
from planexec.fleet import LocalWorker
from planexec.policies import Policy
from planexec.runs import pending_version, run_setup
from planexec.store import open_store, sqlite_path
from planexec.web import actions, start, views
from planexec.web.paths import RunPaths, segment
from planexec.web.security import Guard, csrf_token
from planexec.web.stores import StorePool

__all__ = ["create_app"]

log = logging.getLogger("planexec.web")
_STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
_POLL = 0.3  # seconds between reads of the event log while a page follows a run


def create_app(
    store_target: str,
    *,
    token: str,
    user: str | None = None,
    loopback: bool = True,
    cwd: Path | None = None,
    poll: float = _POLL,
    policies: Sequence[Policy] = (),
    team: Callable[[], Team] | None = None,
    worker: bool = True,
) -> RunPaths:
    """The console over the store at `store_target` (a path or URL, as ``--store`` takes), guarded by `token`.

    `user` is the name decisions are recorded under (default: the OS
    user); `loopback` True answers only to loopback host names; `cwd` is
    the folder runs are started in and a run's tools modules are found
    from when a plan is edited (default: the current one); `policies` (the
    project's) are shown reviewing a plan version that waits. `team` makes
    the team work is submitted through (once, on first use; None: the start
    forms say the console cannot start work); with `worker` the console runs
    approved runs itself, in a thread (`Team.local_worker`), from its start
    (when the store exists) or its first submission, to its stop.
    """
    app = FastAPI(title="planexec console", docs_url=None, redoc_url=None, openapi_url=None)
    env = Environment(loader=PackageLoader("planexec.web", "templates"), autoescape=select_autoescape(["html"]))
    env.filters["segment"] = segment  # a run id in a link: one segment, its "/" encoded
    name = user or _os_user()
    folder = cwd or Path.cwd()
    csrf = csrf_token(token)
    reviewers = list(policies)
    submitter = start.Submitter(team or _no_team, user=name)
    stores = StorePool(store_target)
    local: list[LocalWorker] = []  # the console's worker, once started

    def start_worker() -> None:
        if worker and not local:
            local.append(submitter.team.local_worker(on_note=log.info))
            submitter.worker = local[0]
            local[0].start()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        path = sqlite_path(store_target)
        if worker and team is not None and (path is None or path.exists()):  # runs approved earlier go on now
            try:
                await asyncio.to_thread(start_worker)
            except (PlanexecError, ValueError) as exc:  # no team here (a broken planexec.toml): the runs still show
                log.warning("the console runs no run: its team cannot be made: %s", exc)
        try:
            yield
        finally:
            await submitter.close()
            if local:
                await asyncio.to_thread(local[0].stop)  # runs in hand go back to the queue at their next step boundary
            await asyncio.to_thread(stores.close)  # the stores kept open between requests

    app.router.lifespan_context = lifespan

    store = stores.use  # `with store() as s`: a store for this request alone, kept open between requests; None: none yet

    def page(template: str, code: int = 200, **context: Any) -> HTMLResponse:
        html = env.get_template(template).render(csrf=csrf, user=name, location=store_target, **context)
        return HTMLResponse(html, status_code=code, headers=_HEADERS)

    def missing(run_id: str, code: int = 404, why: str | None = None) -> HTMLResponse:
        return page("missing.html", code=code, run_id=run_id, why=why or submitter.explain(run_id))

    @app.get("/", response_class=HTMLResponse)
    def runs_page(status: str = "", q: str = "") -> HTMLResponse:
        with store() as s:
            rows = views.run_rows(s, state=status or None, query=q) if s is not None else []
            pending = len(s.approvals(pending_only=True)) if s is not None else 0
        return page("runs.html", rows=rows, states=views.STATES, status=status, q=q, pending=pending)

    @app.get("/fragments/runs", response_class=HTMLResponse)
    def runs_table(status: str = "", q: str = "") -> HTMLResponse:
        with store() as s:
            rows = views.run_rows(s, state=status or None, query=q) if s is not None else []
        return page("_runs_rows.html", rows=rows)

    def detail(run_id: str) -> views.RunDetail | None:
        with store() as s:
            try:
                return views.run_detail(s, run_id, policies=reviewers) if s is not None else None
            except RunNotFoundError:
                return None

    @app.get("/runs/{run_id:run}", response_class=HTMLResponse)
    def run_page(run_id: str, done: str = "") -> HTMLResponse:
        d = detail(run_id)
        if d is None:
            return missing(run_id)
        return page("run.html", d=d, state_json=json.dumps(d.state), done=done)

    @app.get("/runs/{run_id:run}/panels", response_class=HTMLResponse)
    def run_panels(run_id: str) -> HTMLResponse:
        d = detail(run_id)
        if d is None:
            return HTMLResponse("", status_code=404)
        return page("_run_panels.html", d=d)

    @app.get("/runs/{run_id:run}/steps/{step_id}/lineage", response_class=HTMLResponse)
    def step_lineage_page(run_id: str, step_id: str) -> HTMLResponse:
        with store() as s:
            try:
                found = views.step_lineage(s, run_id, step_id) if s is not None else None
            except RunNotFoundError:
                return missing(run_id)
        if found is None:
            return missing(run_id, why=f"Run {run_id} has no step {step_id}.")
        return page("lineage.html", l=found)

    @app.get("/runs/{run_id:run}/review", response_class=HTMLResponse)
    def run_review(run_id: str) -> HTMLResponse:
        d = detail(run_id)
        if d is None:
            return HTMLResponse("", status_code=404)
        return page("_review.html", d=d)

    @app.get("/runs/{run_id:run}/stream")
    async def run_stream(run_id: str, request: Request) -> EventSourceResponse:
        return EventSourceResponse(_follow(store_target, run_id, request, poll))

    @app.get("/approvals", response_class=HTMLResponse)
    def approvals_page(done: str = "") -> HTMLResponse:
        with store() as s:
            items = views.inbox(s) if s is not None else []
        return page("approvals.html", items=items, done=done)

    @app.post("/approvals/{approval_id}")
    async def decide(approval_id: int, request: Request) -> Response:
        form = _form(await request.body())
        approved = form.get("decision") == "approve"
        if form.get("decision") not in ("approve", "deny"):
            return PlainTextResponse("decision must be approve or deny", status_code=400)
        back = form.get("next", "/approvals")
        back = back if back.startswith("/") and not back.startswith("//") else "/approvals"

        def work() -> str:
            with store() as s:
                pending = actions.find_pending(s, approval_id) if s is not None else None
                if s is None or pending is None:
                    return f"approval #{approval_id} is no longer pending (decided meanwhile?)"
                what = views.describe(s, pending)["what"]
                try:
                    actions.decide(s, pending, approved=approved, by=name, reason=form.get("reason", "").strip())
                except ApprovalError as exc:
                    return str(exc)
                return f"{'approved' if approved else 'denied'} {what} of run {pending.run_id} (by {name})"

        said = await asyncio.to_thread(work)
        sep = "&" if "?" in back else "?"
        return RedirectResponse(f"{back}{sep}{_query('done', said)}", status_code=303)

    @app.get("/runs/{run_id:run}/edit", response_class=HTMLResponse)
    def edit_page(run_id: str, form: str = "json") -> HTMLResponse:
        with store() as s:
            try:
                found = pending_version(s, run_id) if s is not None else None
            except RunNotFoundError:
                found = None
        if found is None:
            return missing(run_id, why="no stored version of this run's plan waits for approval: there is nothing to edit")
        approval, plan = found
        form = form if form in actions.FORMS else "json"
        try:
            text, note = actions.show(plan, form), None
        except ValueError as exc:  # a plan the compact form cannot say (an id of digits only, ...): JSON it is
            text, note, form = actions.show(plan, "json"), f"this plan cannot be written in the compact form: {exc}", "json"
        return page("edit.html", run_id=run_id, base=approval.content_hash, plan=plan, text=text, form=form, note=note, check=None)

    @app.post("/runs/{run_id:run}/edit", response_class=HTMLResponse)
    async def edit_submit(run_id: str, request: Request) -> Response:
        fields = _form(await request.body())
        text, base, reason = fields.get("plan", ""), fields.get("base", ""), fields.get("reason", "").strip()
        form = fields.get("format", "json") if fields.get("format") in actions.FORMS else "json"
        target = fields.get("convert", "")

        def work() -> tuple[int, dict[str, Any]]:
            with store() as s:
                try:
                    found = pending_version(s, run_id) if s is not None else None
                except RunNotFoundError:
                    found = None
                if s is None or found is None:  # nothing waits any more: the text stays on the page, nothing is saved
                    why = actions.stale_reason(s, run_id, base) if s is not None and base else None
                    stale = why or "no version of this run's plan waits for approval any more"
                    return 409, {"run_id": run_id, "base": "", "plan": None, "text": text, "reason": reason, "check": None, "stale": stale,
                                 "form": form}  # fmt: skip
                approval, plan = found
                context: dict[str, Any] = {"run_id": run_id, "base": base, "plan": plan, "text": text, "reason": reason, "form": form}
                if target in actions.FORMS and target != form:  # show the text in the other form; nothing is saved
                    converted, parsed = actions.convert(text, old=plan, source=form, target=target)
                    if converted is None:
                        return 422, {**context, "check": parsed}
                    return 200, {**context, "text": converted, "form": target, "check": None}
                if base != approval.content_hash:  # someone else's edit (or a replan) came first: never apply this one to it unseen
                    stale = actions.stale_reason(s, run_id, base)
                    return 409, {**context, "base": approval.content_hash, "check": None, "stale": stale}
                tools = [str(t) for t in run_setup(s, run_id).get("tools", [])]
                check = actions.check_edit(text, old=plan, tools=tools, cwd=folder, form=form)
                if check.plan is None:
                    return 422, {**context, "check": check}
                try:
                    actions.submit_edit(s, approval, check.plan, by=name, reason=reason)
                except ApprovalError as exc:  # decided or edited between the read and the write
                    return 409, {**context, "check": None, "stale": str(exc)}
                return 303, {"version": check.plan.version}

        code, context = await asyncio.to_thread(work)
        if code == 303:
            said = f"saved your edit as v{context['version']} (by {name}); the waiting run checks it and its policies review it"
            return RedirectResponse(f"/runs/{segment(run_id)}?{_query('done', said)}", status_code=303)
        return page("edit.html", code=code, **context)

    @app.get("/start", response_class=HTMLResponse)
    def start_page(template: str = "") -> HTMLResponse:
        with store() as s:
            templates = s.templates() if s is not None else []
        return page("start.html", **_start_context(templates, template))

    async def submit(check: start.FormCheck) -> str | None:
        """Submit the valid form; the new run's id, or None with the reason added to `check` (no team here)."""
        try:
            run_id = submitter.submit(check)
        except (PlanexecError, ValueError) as exc:  # the team cannot be made here (a broken planexec.toml, a model name)
            check.add("", f"nothing was started: {exc}")
            return None
        await asyncio.to_thread(start_worker)
        return run_id

    @app.post("/start/goal")
    async def start_goal(request: Request) -> Response:
        form = _form(await request.body())
        check = start.check_goal(form)
        if check.ok:
            run_id = await submit(check)
            if run_id is not None:
                return RedirectResponse(f"/runs/{segment(run_id)}", status_code=303)
        with store() as s:
            templates = s.templates() if s is not None else []
        return page("start.html", code=422, goal=check, **_start_context(templates, ""))

    @app.post("/start/template")
    async def start_template(request: Request) -> Response:
        form = _form(await request.body())

        def work() -> tuple[start.FormCheck, list[Any]]:
            with store() as s:
                check, _ = start.check_template(form, s)
                return check, s.templates() if s is not None else []

        check, templates = await asyncio.to_thread(work)
        if check.ok:
            run_id = await submit(check)
            if run_id is not None:
                return RedirectResponse(f"/runs/{segment(run_id)}", status_code=303)
        return page("start.html", code=422, filled=check, **_start_context(templates, form.get("name", "")))

    @app.api_route("/runs/{address:path}", methods=["GET", "POST"], response_class=HTMLResponse)
    def run_unencoded(address: str, request: Request) -> Response:
        """An address under /runs/ no route took: one with a trailing "/" goes on without it; a run typed with the "/"
        of its id as it is (``/runs/R/step``) goes on to the address its links use; anything else is the console's 404."""
        query = f"?{request.url.query}" if request.url.query else ""
        if request.method == "GET" and address.endswith("/") and address.rstrip("/"):
            return RedirectResponse(f"/runs/{address.rstrip('/')}{query}", status_code=307)
        head, sep, rest = address.partition("/")  # the first segment as sent (`paths.RunPaths`), the rest decoded
        run_id = f"{unquote(head)}{sep}{rest}"
        if request.method == "GET" and sep:
            with store() as s:
                try:
                    found = s is not None and bool(s.run(run_id))
                except RunNotFoundError:
                    found = False
            if found:
                return RedirectResponse(f"/runs/{segment(run_id)}{query}", status_code=307)
        return missing(run_id, why=f"This store has no run {run_id}, and the console no page at this address.")

    @app.get("/static/{asset}")
    def static(asset: str) -> Response:
        if asset not in _STATIC:
            return PlainTextResponse("not found", status_code=404)
        body = (files("planexec.web") / "static" / asset).read_text(encoding="utf-8")
        return Response(body, media_type=_STATIC[asset], headers=_HEADERS)

    @app.exception_handler(StoreError)
    def store_failed(request: Request, exc: StoreError) -> Response:
        return page("missing.html", code=503, run_id="", why=f"the run store failed: {exc}")

    @app.exception_handler(TamperedError)
    def tampered(request: Request, exc: TamperedError) -> Response:  # a run or template changed in the store: nothing was done
        return page("missing.html", code=409, run_id=exc.run_id or "", why=f"refused: {exc}")

    # in front of every route: the guard (`security`), and before it the run ids' segments as sent (`paths`)
    return RunPaths(Guard(app, token=token, loopback=loopback))


def _no_team() -> Team:
    raise ValueError("this console was started without a team to plan with: start it with planexec serve")


def _start_context(templates: list[Any], chosen: str) -> dict[str, Any]:
    """The start page's lists: every template's latest version (by name), and the one chosen with its versions."""
    latest: dict[str, Any] = {}
    for t in templates:
        latest[t.name] = t  # templates() is by name, then version: the last one wins
    picked = latest.get(chosen)
    versions = [t.version for t in templates if t.name == chosen]
    return {"templates": list(latest.values()), "chosen": picked, "versions": versions, "modes": start.GOAL_MODES}


async def _follow(store_target: str, run_id: str, request: Request, poll: float) -> AsyncIterator[dict[str, str]]:
    """The live stream of one run: its state after each batch of new events, until it finishes or the page goes away."""
    opened = await asyncio.to_thread(open_store, store_target, create=False)
    try:
        seen = -2
        while not await request.is_disconnected():
            try:
                last = await asyncio.to_thread(opened.last_seq, run_id)
                if last != seen:
                    state = await asyncio.to_thread(views.live_state, opened, run_id)
                    seen = last
                    yield {"event": "state", "data": json.dumps(state)}
                    if state["finished"]:
                        return
            except RunNotFoundError:
                pass  # not stored yet (a run just started from the console): keep looking
            await asyncio.sleep(poll)
    finally:
        await asyncio.to_thread(opened.close)


def _form(body: bytes) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}


def _query(key: str, value: str) -> str:
    return urlencode({key: value})


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "person"


# no framing by other sites, no sniffing, no referrer leaving the site, scripts and styles only from here
_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make the browser send "Origin: null" on our own forms
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'",
    "Cache-Control": "no-store",
}
