"""Review in the web view (`veralith serve --review`): the view's only writes.

Off unless `--review` is given; then one route takes a POST (`/traces/{id}/labels`, a label on
that trace) and one page lists the review queue (`/review`). Every other route stays GET-only, and
without `--review` every POST is 405 as before.

What a write must pass, in order (each refusal is a 403 with one line, nothing stored):
- the token, when one is set (veralith.web.app._Guard, as for every request), else a loopback Host;
- the same origin: `Origin` (or, when a browser sends none, `Referer`) must be this server's own
  scheme and Host; a request naming neither is refused;
- the CSRF token: the form's `csrf` must equal the per-session `veralith_csrf` cookie (random,
  HttpOnly, SameSite=Strict), compared in constant time;
- the label itself (veralith.review.verdicts.make_label): a known target, value and item.
The form posts application/x-www-form-urlencoded (parsed here: no multipart, no extra dependency)
and needs no script, so the strict CSP stays as it is. Label text is shown only through Jinja2's
autoescape.
"""

from __future__ import annotations

import hmac
import secrets
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from veralith.store import ops

if TYPE_CHECKING:
    from veralith.models import EvaluationResult
    from veralith.store import Store

__all__ = ["CSRF_COOKIE", "Review"]

CSRF_COOKIE = "veralith_csrf"
_MAX_BODY = 16_384        # a label form is a few hundred bytes
_QUEUE_SHOWN = 50


def _session_token(request: Request) -> tuple[str, bool]:
    """(the session's CSRF token, whether it is new and must be set as a cookie); a new one is made
    once per request, so the form and the cookie carry the same."""
    found = request.cookies.get(CSRF_COOKIE, "")
    if len(found) == 64 and all(c in "0123456789abcdef" for c in found):
        return found, False
    made = getattr(request.state, "csrf", None)
    if made is None:
        made = request.state.csrf = secrets.token_hex(32)
    return made, True


def _same_origin(request: Request) -> bool:
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if not claimed or claimed == "null":
        return False
    parts = urlsplit(claimed)
    host = request.headers.get("host", "")
    return bool(host) and parts.scheme == request.url.scheme and parts.netloc.lower() == host.lower()


class Review:
    """The review routes over a store opened for writing (labels only)."""

    def __init__(self, where: Any) -> None:
        from veralith.store import open_store

        self.store: Store = open_store(where)

    def context(self, request: Request, result: EvaluationResult | None, trace_id: int) -> dict[str, Any]:
        """What the trace page needs for its correction form: the labels so far, the choices, the
        session's CSRF token."""
        from veralith.review.verdicts import items, judged
        from veralith.store.labels import VALUES, labels_of

        token, _ = _session_token(request)
        targets = [] if result is None else [
            (target, item, judged(result, target, item)) for target in ("cell", "gate", "claim", "sufficiency",
                                                                         "coverage")
            for item in items(result, target)]
        return {"review": {"csrf": token, "labels": self.store.read(labels_of, trace_id), "targets": targets,
                           "choices": VALUES, "action": f"/traces/{trace_id}/labels"}}

    def with_cookie(self, request: Request, response: Response) -> Response:
        token, new = _session_token(request)
        if new:
            response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    async def post_label(self, request: Request) -> Response:
        from veralith.review.verdicts import make_label
        from veralith.store import TraceNotEvaluated
        from veralith.store.labels import LabelError, add_labels

        if not _same_origin(request):
            return PlainTextResponse("refused: a label is taken only from this server's own pages (Origin)", 403)
        body = await request.body()
        if len(body) > _MAX_BODY:
            return PlainTextResponse("refused: the form is too large", 413)
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", errors="replace")).items()}
        session, _ = _session_token(request)
        if not hmac.compare_digest(form.get("csrf", "").encode(), session.encode()) \
                or CSRF_COOKIE not in request.cookies:
            return PlainTextResponse("refused: the form's CSRF token does not match this session; reload the page",
                                     403)
        trace_id = int(request.path_params["trace_id"])
        target, _, item = form.get("part", "").partition(":")
        try:
            result = self.store.read(ops.load_result, trace_id)
            label = make_label(result, target, item, form.get("value", ""), reviewer=form.get("reviewer", "")[:200],
                               note=(form.get("note") or "")[:2000] or None,
                               evaluated_at=self.store.read(ops.trace_info, trace_id).evaluated_at)
        except TraceNotEvaluated:
            return PlainTextResponse(f"trace {trace_id} has no result to label", 404)
        except LabelError as exc:
            return PlainTextResponse(f"not stored: {exc}", 400)
        self.store.write(add_labels, [label])
        return RedirectResponse(f"/traces/{trace_id}#labels", status_code=303)

    def queue_rows(self, request: Request) -> list[dict[str, Any]]:
        """The next traces to review (labels.queue, not per reviewer): id and the row the list shows."""
        from veralith.store.labels import queue

        ids = self.store.read(queue, reviewer=None, kb=request.query_params.get("kb") or None, limit=_QUEUE_SHOWN)
        rows = [self.store.read(ops.trace_row, trace_id) for trace_id in ids]
        return [row for row in rows if row is not None]
