"""The `veralith serve` application: Starlette routes over a store opened read-only, Jinja2 pages.

It reads the store only through the shared SQL functions (veralith.store.ops, run with
`store.read`), so it serves a SQLite file and a PostgreSQL history alike.

Safety contract (tests/test_web*.py check each in a browser or over HTTP):
- Read-only: the store is opened `read_only` (SQLite: `mode=ro` and `query_only`; PostgreSQL:
  read-only transactions), and only GET and HEAD are routed. The one exception is review
  (`create_app(..., review=True)`, `veralith serve --review`): one POST route for labels, with its
  own checks (veralith.web.review).
- Every value reaches the page through Jinja2 autoescape; no URL is ever built from trace text.
- Every response carries a strict Content-Security-Policy: no script at all, styles and images
  only from this server, no framing, no form posts elsewhere; the pages need no script (a claim's
  evidence opens with CSS `:target`).
- With a token, every request (static files too) must present it, compared in constant time; the
  `?token=` of the URL `veralith serve` prints sets an HttpOnly, SameSite=Strict cookie and is
  removed from the address by a redirect.
- Without a token (loopback only), requests must name a loopback Host (`localhost` or a loopback
  address literal, veralith.web.hosts: so `--host 127.0.0.2` answers its own address), so a web page
  that rebinds its own domain name to 127.0.0.1 cannot read the history from the user's browser.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import sqlite3
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from veralith.config import redact_configured
from veralith.errors import StoreError
from veralith.llm.local.about import about
from veralith.models import EvaluationResult
from veralith.safe_text import laid_out
from veralith.store import Store, browse, open_store, ops
from veralith.web import chart, views
from veralith.web.hosts import is_loopback

__all__ = ["CSP", "create_app"]

HERE = Path(__file__).resolve().parent
CSP = ("default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self'; font-src 'none'; "
       "connect-src 'none'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")

# Referrer-Policy same-origin (here and in base.html's meta), not no-referrer: nothing, a token in a URL
# included, goes to another site, and a browser still sends the real Origin with a same-origin form POST
# (under no-referrer Chromium sends "Origin: null", and `serve --review` refuses a label from an unknown origin).
_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY"),
            (b"cross-origin-opener-policy", b"same-origin"), (b"cache-control", b"no-store")]
TOKEN_COOKIE = "veralith_token"
PAGE_SIZE = 50
COMPARE_LIMIT = 50  # traces per "only in" list on the compare page, as `veralith compare --limit` defaults
GROUP_LIMIT = 10    # traces shown per group of changes on the compare page (`?limit=0`: all)
PATTERN_LIMIT = 5  # groups per kind of cause on the patterns page, as `veralith patterns --limit` defaults
DAYS = 30
COST_DAYS_SHOWN = 7   # days of cost listed on the overview; the rest of DAYS fold away
RUNS_SHOWN = 12

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def create_app(where: str | os.PathLike[str], *, token: str | None = None, page_size: int = PAGE_SIZE,
               review: bool = False) -> ASGIApp:
    """The ASGI app serving the store at `where` (a SQLite file or a store URL) read-only,
    `page_size` traces per page.

    The store is opened read-only (and its schema checked) once here, so a wrong path or URL fails
    before the server starts (StoreError); requests then share its pool of read-only connections.
    """
    store = open_store(where, read_only=True)
    store.read(ops.knowledge_bases)  # a first read: a store that cannot be read fails here, not on the first page
    pages = _Pages(store, page_size)
    if review:
        from veralith.web.review import Review

        pages.review = Review(where)
    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/traces", pages.traces, name="traces"),
        Route("/traces/{trace_id:int}", pages.trace, name="trace"),
        Route("/compare", pages.compare, name="compare"),
        Route("/patterns", pages.patterns, name="patterns"),
        Route("/agreement", pages.agreement, name="agreement"),
        Route("/favicon.ico", pages.favicon, name="favicon"),
        Route("/metrics", pages.metrics, name="metrics"),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    if pages.review is not None:
        routes += [Route("/review", pages.review_queue, name="review"),
                   Route("/traces/{trace_id:int}/labels", pages.review.post_label, methods=["POST"], name="label")]
    else:  # the path exists only for GET, so a POST to it is 405 like every POST without --review
        routes.append(Route("/traces/{trace_id:int}/labels", pages.no_review, methods=["GET"], name="label"))
    from veralith.store.runs import RunNotFound

    # Starlette picks the handler of the most specific class: an unknown run is a 404, not an outage.
    app = Starlette(routes=routes, exception_handlers={404: pages.not_found, 405: pages.not_allowed,
                                                       RunNotFound: pages.no_such_run, StoreError: pages.unavailable,
                                                       sqlite3.Error: pages.unavailable})
    return _Guard(app, token)


class _Guard:
    """Security headers on every response; the token or the loopback Host check on every request."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.digest = hashlib.sha256(token.encode()).digest() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        request = Request(scope)
        if self.digest is None:
            if not is_loopback(_host_name(request.headers.get("host", ""))):
                reply: Response = PlainTextResponse("this server only answers requests for localhost or a "
                                                    "loopback address such as 127.0.0.1", status_code=403)
                return await reply(scope, receive, with_headers)
            return await self.app(scope, receive, with_headers)
        offered = request.query_params.get("token")
        if offered is not None and self._ok(offered):
            # Trade the token in the address for a cookie, and drop it from the address bar and history.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            # One leading slash: "//host/..." would be read as another site.
            target = "/" + request.url.path.lstrip("/")
            reply = RedirectResponse(target + ("?" + urlencode(rest) if rest else ""), status_code=303)
            reply.set_cookie(TOKEN_COOKIE, offered, httponly=True, samesite="strict", path="/")
            return await reply(scope, receive, with_headers)
        auth = request.headers.get("authorization", "")
        presented = auth[7:] if auth.lower().startswith("bearer ") else request.cookies.get(TOKEN_COOKIE, "")
        if not self._ok(presented):
            reply = PlainTextResponse("a token is required: open the address `veralith serve` printed, or send "
                                      "Authorization: Bearer <token>", status_code=401)
            return await reply(scope, receive, with_headers)
        return await self.app(scope, receive, with_headers)

    def _ok(self, presented: str) -> bool:
        # Digests of equal length, compared in constant time: neither the content nor the length leaks.
        assert self.digest is not None
        return hmac.compare_digest(hashlib.sha256(presented.encode()).digest(), self.digest)


def _host_name(host: str) -> str:
    """The host name of a Host header, lower-cased (host names are case-insensitive)."""
    host = host.lower()
    if host.startswith("["):                       # [::1]:8765
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class _BadFilter(ValueError):
    pass


class _Pages:
    def __init__(self, store: Store, page_size: int) -> None:
        # Starlette runs the sync handlers on worker threads that come and go; a store serves any
        # thread, each call on a connection of its read-only pool.
        self.store, self.page_size = store, page_size
        self.review: Any = None   # veralith.web.review.Review with --review
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(
            enabled_extensions=("html",), default_for_string=True, default=True), undefined=StrictUndefined,
            trim_blocks=True, lstrip_blocks=True)
        # `visible`: user text as the page lays it out (line breaks, direction marks), every character
        # that could spoof written out (veralith.safe_text.laid_out).
        # `masked`: error text (stored before a password was masked at the source, or a store's error
        # naming its URL) with secrets masked by the one rule (veralith.redact), then laid out.
        self.env.filters.update(visible=laid_out, masked=_masked, pct=_pct, usd=_usd, num=_num, ms=_ms,
                                jsonish=_jsonish)
        self.env.globals.update(CELLS=browse.CELLS, GATES=browse.GATES, CELL_ORDER=chart.CELL_ORDER,
                                NO_CELL=browse.NO_CELL, reviewing=lambda: self.review is not None)

    def _filter(self, request: Request) -> browse.TraceFilter:
        """The request's filter, its `run` given by id or by name as /compare takes it (a name the
        newest run of that name: veralith.store.runs.resolve_run); an unknown run is RunNotFound."""
        from veralith.store import runs

        ref = request.query_params.get("run", "").strip()
        if ref and not ref.isdigit():
            if len(ref) > 200:
                raise _BadFilter("a run is named by its id or a name of at most 200 characters")
            return _filter(request, run=self.store.read(runs.resolve_run, ref).id)
        return _filter(request)

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        if "message" in context:  # an error page's message may quote a store's error, and its URL
            context["message"] = redact_configured(context["message"])
        return HTMLResponse(self.env.get_template(name).render(**context), status_code=status)

    def overview(self, request: Request) -> Response:
        store = self.store
        # The knowledge bases with the most failing results first: where to look.
        kbs = dict(sorted(store.read(ops.kb_figures).items(), key=lambda kv: (-kv[1]["by_gate"].get("fail", 0), kv[0])))
        daily = store.read(ops.daily_figures, days=DAYS)
        figures = store.read(ops.stats) if kbs else {"thresholds": {}, "app_latency": {}}
        set_aside = figures["dead_letters"] if kbs else store.read(ops.stats)["dead_letters"]
        runs = self._runs()

        def day_link(kb: str) -> Any:
            return lambda day, cell: _link("/traces", browse.TraceFilter(
                kb=kb, cell=cell, since=dt.date.fromisoformat(day), until=dt.date.fromisoformat(day)))

        charts = {kb: chart.cell_chart(daily["days"], daily["by_kb"].get(kb, {}), link=day_link(kb)) for kb in kbs}
        cost_days = [(day, daily["cost"][day]) for day in reversed(daily["days"]) if day in daily["cost"]]
        cost_total = {"usd": sum(c["usd"] for _, c in cost_days), "unknown": sum(c["unknown"] for _, c in cost_days)}
        return self.render("overview.html", page="overview", kbs=kbs, charts=charts, thresholds=figures["thresholds"],
                           latency=figures["app_latency"], cost_days=cost_days, cost_total=cost_total,
                           cost_shown=COST_DAYS_SHOWN, days=daily["days"], runs=runs, set_aside=set_aside,
                           kb_link=lambda kb, **extra: _link("/traces", browse.TraceFilter(kb=kb), **extra))

    def _runs(self) -> dict[str, Any]:
        """The newest runs with their totals, cells and a chart over them (oldest first)."""
        newest = self.store.read(ops.list_runs, limit=RUNS_SHOWN)
        cells = self.store.read(ops.run_cells, [(r.id, r.source) for r in newest])
        ordered = newest[::-1]
        keys = [str(r.id) for r in ordered]
        graph = chart.cell_chart(keys, {str(r.id): cells[r.id] for r in ordered}, labels=[f"#{r.id}" for r in ordered],
                                 link=lambda run, cell: _link("/traces", browse.TraceFilter(run=int(run), cell=cell)))
        return {"list": newest, "cells": cells, "chart": graph}

    def traces(self, request: Request) -> Response:
        try:
            flt = self._filter(request)
            before, after = _int_param(request, "before"), _int_param(request, "after")
            if before is not None and after is not None:
                raise _BadFilter("give before or after, not both")
            sort, cursor = _sort(request)
        except _BadFilter as exc:
            return self.render("error.html", 400, page="traces", title="Bad filter", message=str(exc))
        store = self.store
        if sort is None:
            page = store.read(ops.page_traces, flt, limit=self.page_size, before=before, after=after)
            rows, newer, older, searched_to, next_cursor = page.rows, page.newer, page.older, page.searched_to, None
        else:
            sorted_page = store.read(ops.page_sorted, flt, sort=sort, limit=self.page_size, cursor=cursor)
            rows, newer, older, next_cursor = sorted_page.rows, None, None, sorted_page.next
            searched_to = sorted_page.searched_to
        total = store.read(ops.count_traces, flt)
        reasons = views.row_reasons(store, rows)
        kbs = store.read(ops.knowledge_bases)
        runs = store.read(ops.run_labels)
        return self.render("traces.html", page="traces", flt=flt, rows=rows, newer=newer, older=older,
                           searched_to=searched_to, window=browse.SCAN_WINDOW, kbs=kbs, runs=runs, total=total,
                           reasons=reasons, sort=sort, first=cursor is None and after is None and before is None,
                           next_link=None if next_cursor is None else _link(
                               "/traces", flt, sort=sort, cursor=f"{next_cursor[0]!r}_{next_cursor[1]}"),
                           sort_link=lambda key: _link("/traces", flt, sort=key),
                           quick_link=lambda gate, sort: _link("/traces", replace(flt, gate=gate), sort=sort),
                           link=lambda **extra: _link("/traces", flt, **extra),
                           trace_link=lambda trace_id: _link(f"/traces/{trace_id}", flt))

    def trace(self, request: Request) -> Response:
        from veralith.store import TraceNotEvaluated

        trace_id = request.path_params["trace_id"]
        try:
            flt = self._filter(request)
        except _BadFilter as exc:
            return self.render("error.html", 400, page="traces", title="Bad filter", message=str(exc))
        # An id past what a store holds (2**63) names no trace; binding it would raise OverflowError.
        row = self.store.read(ops.trace_row, trace_id) if trace_id < 2**63 else None
        if row is None:
            return self.render("error.html", 404, page="traces", title="Not found",
                               message=f"No trace has id {trace_id}.")
        try:
            result: EvaluationResult | None = self.store.read(ops.load_result, trace_id)
        except TraceNotEvaluated:
            result = None
        except (sqlite3.DatabaseError, ValueError, StoreError) as exc:
            return self.render("error.html", 500, page="traces", title="Unreadable trace",
                               message=f"Trace {trace_id} cannot be read: {exc}")
        near = self.store.read(ops.neighbours, trace_id, flt)
        earlier = self.store.read(ops.history, trace_id)
        context: dict[str, Any] = {"page": "trace", "row": row, "result": result, "flt": flt, "about_local": about(),
                                   "query_shown": views.QUERY_SHOWN, "chunk_shown": views.CHUNK_SHOWN,
                                   "history": earlier,
                                   "metadata": json.loads(row["metadata"] or "{}"),
                                   "newer": _neighbour(near.newer, near.newer_unsearched, "after", trace_id, flt),
                                   "older": _neighbour(near.older, near.older_unsearched, "before", trace_id, flt),
                                   "back": _link("/traces", flt)}
        if result is not None:
            from veralith.pipeline.describe import describe

            said = describe(result)
            every = request.query_params.get("claims") == "all"
            claims, left_out = views.claim_views(result, said.claims, limit=None if every else views.CLAIMS_SHOWN)
            judged = {j.sub_question_id: j for j in result.sufficiency}
            query = _gist(result.query)
            context.update(
                said=said, segments=views.response_segments(result), claims=claims, claims_left_out=left_out,
                detailed={c.index for c in claims}, all_claims_link=_link(f"/traces/{trace_id}", flt, claims="all"),
                # (line, sufficiency judgment, whether its text is the whole query: then it is not repeated)
                sub_questions=[(q, judged.get(q.id), _gist(q.text) == query) for q in said.questions])
        if self.review is None:
            return self.render("trace.html", **context)
        context.update(self.review.context(request, result, trace_id))
        return self.review.with_cookie(request, self.render("trace.html", **context))

    def no_review(self, request: Request) -> Response:
        return self.render("error.html", 404, page="traces", title="Review is off",
                           message="Labels are taken only when the server runs with `veralith serve --review`.")

    def review_queue(self, request: Request) -> Response:
        """The traces to review next (--review): needs-review, failing, then a sample of the rest."""
        return self.render("review.html", page="review", rows=self.review.queue_rows(request))

    def compare(self, request: Request) -> Response:
        """Two runs side by side: the content of `veralith compare A B` (veralith.compare), each list
        grouped by the kind of failure its reasons name and each group cut at `limit` traces (default
        GROUP_LIMIT, 0: all). Without runs named: the newest run and the newest earlier one that shares
        a trace with it (veralith.compare.latest_pair)."""
        from veralith.compare import compare_runs, group_changes, latest_pair, left_out_note, paired_label
        from veralith.compare.correctness import LAYERS, correctness_note
        from veralith.store.runs import RunNotFound

        try:
            limit = _int_param(request, "limit")
        except _BadFilter as exc:
            return self.render("error.html", 400, page="compare", title="Bad limit", message=str(exc))
        labels = self.store.read(ops.run_labels, limit=200)
        a, b = request.query_params.get("a", "").strip(), request.query_params.get("b", "").strip()
        picked = None
        if not a and not b and len(labels) >= 2:  # the default question: what did the last run change?
            picked = latest_pair(self.store)
            if picked is not None:
                a, b = str(picked[0].id), str(picked[1].id)
        comparison = None
        if a and b:
            if len(a) > 200 or len(b) > 200:
                return self.render("error.html", 400, page="compare", title="Bad run",
                                   message="a run is named by its id or a name of at most 200 characters")
            try:
                # Browsing, not gating: shown whatever the modes, with the page saying when they differ.
                comparison = compare_runs(self.store, a, b, allow_mixed_modes=True)
            except RunNotFound as exc:
                return self.render("error.html", 404, page="compare", title="No such run", message=str(exc))
        # The form selects the runs compared, by id, whether they were asked for by id or by name.
        chosen = (comparison.run_a["id"], comparison.run_b["id"]) if comparison else (None, None)
        for run in (comparison.run_a, comparison.run_b) if comparison else ():
            if all(run_id != run["id"] for run_id, _ in labels):  # older than the newest 200: offer it too
                labels.append((run["id"], f"#{run['id']}" + (f" {run['name']}" if run.get("name") else "")))
        lists = [] if comparison is None else [
            (title, len(changes), group_changes(changes)) for title, changes in (
                ("Regressions (pass → fail)", comparison.regressions),
                ("Improvements (fail → pass)", comparison.improvements),
                ("Indeterminate changes", comparison.indeterminate_changes),
                ("Not judged in A or B", comparison.not_judged))
            if changes or not title.startswith("Not judged")]
        return self.render("compare.html", page="compare", labels=labels, a=a, b=b, c=comparison, chosen=chosen,
                           same=comparison is not None and chosen[0] == chosen[1], lists=lists,
                           group_limit=GROUP_LIMIT if limit is None else limit or None,
                           only_limit=COMPARE_LIMIT if limit is None else limit or None,
                           left_out=left_out_note(comparison) if comparison else None,
                           paired=paired_label(comparison) if comparison else "",
                           correctness_note=correctness_note(comparison.correctness)
                           if comparison and comparison.correctness else None, layers=LAYERS,
                           picked=picked, cells=comparison_cells(), all_link="/compare?" + urlencode(
                               {"a": chosen[0], "b": chosen[1], "limit": 0}))

    def patterns(self, request: Request) -> Response:
        """Failing traces grouped by shared cause: the content of `veralith patterns` (veralith.patterns)
        for the knowledge base, run and dates chosen (the traces page's date rule: UTC days, inclusive)."""
        from veralith.patterns import find_patterns
        from veralith.store.runs import RunNotFound

        try:
            flt = self._filter(request)
            limit = _int_param(request, "limit")
            if limit is not None and not 1 <= limit <= 1000:
                raise _BadFilter("limit must be from 1 to 1000")
        except _BadFilter as exc:
            return self.render("error.html", 400, page="patterns", title="Bad filter", message=str(exc))
        until = None if flt.until is None else flt.until + dt.timedelta(days=1)
        kbs, runs = self.store.read(ops.knowledge_bases), self.store.read(ops.run_labels, limit=200)
        try:
            found = find_patterns(self.store, kb=flt.kb, run=None if flt.run is None else str(flt.run),
                                  since=_utc_text(flt.since), until=_utc_text(until), limit=limit or PATTERN_LIMIT)
        except RunNotFound as exc:
            return self.render("error.html", 404, page="patterns", title="No such run", message=str(exc))
        return self.render("patterns.html", page="patterns", p=found, flt=flt, kbs=kbs, runs=runs)

    def agreement(self, request: Request) -> Response:
        """How often the judge agrees with reviewers' labels: the content of `veralith agreement`
        (veralith.review.report) for the knowledge base and labels from the date chosen. Read-only."""
        from veralith.web.agreement import agreement_context

        try:
            flt = self._filter(request)
        except _BadFilter as exc:
            return self.render("error.html", 400, page="agreement", title="Bad filter", message=str(exc))
        # labels are not kept per run, so the form offers no run (runs=[])
        return self.render("agreement.html", page="agreement", flt=flt, kbs=self.store.read(ops.knowledge_bases),
                           runs=[], **agreement_context(self.store, flt.kb, flt.since))

    def metrics(self, request: Request) -> Response:
        """Prometheus text of the store's queue (veralith.store.queue), behind the same token and Host
        checks as every page (a scraper sends `Authorization: Bearer <token>`)."""
        from veralith.store.queue import CONTENT_TYPE, exposition, read_or_none

        return Response(exposition(lambda: read_or_none(self.store)), media_type=CONTENT_TYPE)

    def favicon(self, request: Request) -> Response:
        return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")

    async def unavailable(self, request: Request, exc: Exception) -> Response:
        """A database that cannot be read now (locked past the busy timeout, vanished, damaged): an
        error page, never a traceback."""
        return self.render("error.html", 503, page="", title="Database unavailable",
                           message=f"The database cannot be read right now ({exc}). Try again in a moment; if it "
                                   "persists, check the file `veralith serve` was started on.")

    async def no_such_run(self, request: Request, exc: Exception) -> Response:
        page = request.url.path.strip("/").split("/")[0] or "overview"
        return self.render("error.html", 404, page=page, title="No such run", message=str(exc))

    async def not_found(self, request: Request, exc: Exception) -> Response:
        return self.render("error.html", 404, page="", title="Not found", message="There is no page at this address.")

    async def not_allowed(self, request: Request, exc: Exception) -> Response:
        return PlainTextResponse("read-only: only GET and HEAD", status_code=405)


def comparison_cells() -> tuple[str, ...]:
    from veralith.compare import CELLS

    return CELLS


def _filter(request: Request, *, run: int | None = None) -> browse.TraceFilter:
    """The filter from the query string (with `run` resolved by the caller when given); a value that is
    not one the store knows is a 400, not a guess."""
    q = request.query_params

    def opt(name: str) -> str | None:
        value = q.get(name, "").strip()
        return value or None

    cell, gate = opt("cell"), opt("gate")
    if cell is not None and cell not in (*browse.CELLS, browse.NO_CELL):
        raise _BadFilter(f"cell must be one of {', '.join(browse.CELLS)} or {browse.NO_CELL}")
    if gate is not None and gate not in browse.GATES:
        raise _BadFilter(f"gate must be one of {', '.join(browse.GATES)}")
    dates = {}
    for name in ("since", "until"):
        value = opt(name)
        try:
            dates[name] = None if value is None else dt.date.fromisoformat(value)
        except ValueError:
            raise _BadFilter(f"{name} must be a date such as 2026-01-31") from None
    text = opt("q")
    if text is not None and len(text) > 200:
        raise _BadFilter("the text filter is limited to 200 characters")
    return browse.TraceFilter(cell=cell, gate=gate, kb=opt("kb"), since=dates["since"], until=dates["until"],
                              text=text, run=run if run is not None else _int_param(request, "run"))


def _gist(text: str) -> str:
    """Text as compared for "is this sub-question the whole query": spacing, case and the punctuation
    at its ends aside (a decomposer may drop a trailing comma or add a question mark)."""
    return " ".join(text.split()).strip(" .,;:?!").casefold()


def _utc_text(day: dt.date | None) -> str | None:
    """The start of a UTC day as the ISO text traces' `created_at` is stored in."""
    if day is None:
        return None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).isoformat(timespec="microseconds")


def _sort(request: Request) -> tuple[str | None, tuple[float, int] | None]:
    """The traces page's order (None: newest first) and, for another order, where the page starts."""
    sort = request.query_params.get("sort") or None
    if sort in (None, "newest"):
        return None, None
    if sort not in browse.SORTS:
        raise _BadFilter(f"sort must be one of newest, {', '.join(browse.SORTS)}")
    raw = request.query_params.get("cursor")
    if not raw:
        return sort, None
    key, sep, ident = raw.rpartition("_")
    try:
        value = float(key)
        if not sep or not ident.isdigit() or len(ident) > 18 or value != value or abs(value) > 2**53:
            raise ValueError
    except ValueError:
        raise _BadFilter("cursor must be the one a page's next link gives") from None
    return sort, (value, int(ident))


def _int_param(request: Request, name: str) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 18:
        raise _BadFilter(f"{name} must be an id (digits)")
    return int(value)


def _filter_query(flt: browse.TraceFilter) -> list[tuple[str, str]]:
    pairs = [("cell", flt.cell), ("gate", flt.gate), ("kb", flt.kb),
             ("since", flt.since.isoformat() if flt.since else None),
             ("until", flt.until.isoformat() if flt.until else None), ("q", flt.text),
             ("run", None if flt.run is None else str(flt.run))]
    return [(k, v) for k, v in pairs if v is not None]


def _neighbour(found: int | None, unsearched: bool, direction: str, trace_id: int,
               flt: browse.TraceFilter) -> tuple[str, bool] | None:
    """(URL, is-a-search-link) for a neighbour link: the trace itself, or when a text search's window
    found none, the list going on from this trace in that direction."""
    if found is not None:
        return _link(f"/traces/{found}", flt), False
    if unsearched:
        return _link("/traces", flt, **{direction: trace_id}), True
    return None


def _link(path: str, flt: browse.TraceFilter, **extra: Any) -> str:
    """A same-site URL: a fixed path plus the filter, URL-encoded (the template escapes it once more)."""
    pairs = _filter_query(flt) + [(k, str(v)) for k, v in extra.items() if v is not None]
    return path + ("?" + urlencode(pairs) if pairs else "")


def _jsonish(value: Any) -> str:
    """A metadata value as text: strings as they are, anything else as JSON (escaped later, as all text)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _masked(text: object) -> str:
    return laid_out(redact_configured(text))


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def _num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} ms"
