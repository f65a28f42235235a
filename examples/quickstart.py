"""Veralith in thirty seconds: one synchronous evaluation, read straight off the typed result.

Runs offline with the local heuristic judges when no OpenAI key or base URL is configured
(VERALITH_BACKEND=auto picks `local` then); set OPENAI_API_KEY to use an LLM judge instead.

    python examples/quickstart.py
"""

import veralith

result = veralith.evaluate(
    query="What is a P/E ratio and what was Apple's P/E in 2023?",
    context=[
        "The price-to-earnings (P/E) ratio is a company's share price "
        "divided by its earnings per share."
    ],
    response=(
        "A P/E ratio divides share price by earnings per share. "
        "Apple's P/E in 2023 was 42.7."
    ),
    persist=False,  # in memory only: no database is created
)

# The definition is grounded in the context; the 42.7 is not, and the context never covered
# Apple's P/E at all. So the trace lands in the worst-case cell.
print(result.failure_cell.value if result.failure_cell else "not classified")  # incomplete_ungrounded
if result.suggestion is not None:
    print(result.suggestion.title)                                          # Worst-case failure
    for action in result.suggestion.actions:
        print(" -", action)
