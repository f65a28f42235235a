"""Six realistic traces, one per failure cell, that the local backend places in that cell.

Written for Veralith's tests (not taken from any dataset). tests/test_local_backend.py checks each
lands where it says; end-to-end tests may reuse them as known-good fixtures.
"""

from __future__ import annotations

_TOWER = ("The Eiffel Tower was built by the engineering company of Gustave Eiffel and completed in March 1889 "
          "as the entrance arch to the 1889 World's Fair in Paris.")
_HEIGHT = "The tower is 330 metres tall and was the tallest man-made structure in the world until 1930."
_LOUVRE = "The Louvre in Paris is the world's most-visited museum, with about 8.9 million visitors in 2023."

SIX_CELL_TRACES: list[dict] = [
    {
        "cell": "complete_grounded",
        "query": "When was the Eiffel Tower completed?",
        "context": [_TOWER, _HEIGHT],
        "response": "The Eiffel Tower was completed in March 1889, in time for the World's Fair in Paris.",
    },
    {
        "cell": "complete_ungrounded",
        "query": "When was the Eiffel Tower completed?",
        "context": [_TOWER],
        # The answer is grounded; a detail backing it up (the crew) is invented.
        "response": ("The Eiffel Tower was completed in March 1889. "
                     "That was the deadline set by its 1886 contract with the city of Lyon."),
    },
    {
        "cell": "incomplete_grounded",
        "query": "Who built the Eiffel Tower and how tall is the tower?",
        "context": [_TOWER],
        "response": "The Eiffel Tower was built by the engineering company of Gustave Eiffel.",
    },
    {
        "cell": "incomplete_ungrounded",
        "query": "What is a P/E ratio and what was Apple's P/E in 2023?",
        "context": ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings per share."],
        "response": "A P/E ratio divides share price by earnings per share. Apple's P/E in 2023 was 42.7.",
    },
    {
        "cell": "extra_grounded",
        "query": "When was the Eiffel Tower completed?",
        "context": [_TOWER, _LOUVRE],
        "response": ("The Eiffel Tower was completed in March 1889. "
                     "The Louvre is the world's most-visited museum, with about 8.9 million visitors in 2023."),
    },
    {
        "cell": "extra_ungrounded",
        "query": "When was the Eiffel Tower completed?",
        "context": [_TOWER, _LOUVRE],
        "response": ("The Eiffel Tower was completed in March 1889. "
                     "Many visitors say the Louvre's glass pyramid was designed by Frank Gehry in 2004."),
    },
]
