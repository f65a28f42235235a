"""The pytest plugin (entry point `pytest11: veralith`): a `veralith` fixture for RAG tests.

    def test_refund_answer(veralith):
        veralith.assert_diagnosis(query, chunks, answer, cell="complete_grounded")

    def test_the_judge_agrees_with_our_reviewers(veralith):
        veralith.assert_agreement("labelled.jsonl", min_agreement=0.9)   # from `veralith export --labelled`

The fixture evaluates without writing to the database and, with `--veralith-backend local|openai`
(or the `veralith_backend` ini option), runs every test on that judge backend; otherwise the
usual settings (VERALITH_BACKEND, an API key) decide. A failed assertion's message shows the cell,
the ungrounded claims and the uncovered sub-questions (veralith.testing.assert_diagnosis).

The plugin loads in every pytest session of an environment where veralith is installed, so this
module imports nothing but pytest: Veralith itself loads only when a test asks for the fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["VeralithFixture", "veralith"]

_BACKENDS = ("auto", "openai", "local")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("veralith", "Veralith RAG diagnosis")
    group.addoption("--veralith-backend", choices=_BACKENDS, default=None,
                    help="judge backend for the `veralith` fixture (default: VERALITH_BACKEND / auto)")
    parser.addini("veralith_backend", "judge backend for the `veralith` fixture (auto, openai or local)",
                  default="")


class VeralithFixture:
    """What the `veralith` fixture gives a test."""

    def evaluate(self, query: str, context: Any, response: str, **kwargs: Any) -> Any:
        """veralith.evaluate without persisting (unless `persist=True` is passed)."""
        import veralith

        kwargs.setdefault("persist", False)
        return veralith.evaluate(query, context, response, **kwargs)

    def assert_diagnosis(self, query: str, context: Any, response: str, **kwargs: Any) -> Any:
        """veralith.testing.assert_diagnosis: check the cell and gate; explain on failure."""
        __tracebackhide__ = True
        from veralith.testing import assert_diagnosis

        return assert_diagnosis(query, context, response, **kwargs)

    def assert_agreement(self, path: Any, min_agreement: float = 0.9, **kwargs: Any) -> Any:
        """veralith.testing.assert_agreement: judge a labelled export (`veralith export --labelled`) and
        check the judge agrees with the people's verdicts at least `min_agreement` of the time (the
        gate of `veralith eval FILE --expect --min-agreement X`)."""
        __tracebackhide__ = True
        from veralith.testing import assert_agreement

        return assert_agreement(path, min_agreement, **kwargs)


@pytest.fixture
def veralith(request: pytest.FixtureRequest) -> Iterator[VeralithFixture]:
    """Evaluate traces and assert on their diagnosis; see veralith.testing."""
    backend = request.config.getoption("--veralith-backend") or request.config.getini("veralith_backend") or None
    if backend is not None and backend not in _BACKENDS:
        raise pytest.UsageError(f"veralith_backend = {backend!r}: use one of {', '.join(_BACKENDS)}")
    from veralith.config import settings

    with settings.override(**({"backend": backend} if backend else {})):
        yield VeralithFixture()
