"""The demo batch: questions the documentation answers, questions it does not, and questions that
tempt a generator to make something up. `kind` is what we expect, not what Veralith is told."""

from __future__ import annotations

__all__ = ["QUESTIONS"]

QUESTIONS: list[tuple[str, str]] = [
    ("answerable", "How long do the mast batteries last?"),
    ("answerable", "Does the console work with 5 GHz Wi-Fi?"),
    ("answerable", "What does Orbitra Cloud cost and what does it add?"),
    ("answerable", "How much does the Orbitra 3 cost and is shipping free in the EU?"),
    ("answerable", "What is the wind speed range, and does the anemometer need maintenance?"),
    ("answerable", "How do I reset the console to factory settings?"),
    ("answerable", "Which smart-home systems does the console work with?"),
    ("not in the docs", "Can the Orbitra 3 measure the UV index?"),
    ("not in the docs", "What is the phone number of Skylark support?"),
    ("not in the docs", "Does the Orbitra 3 work with Google Home?"),
    ("not in the docs", "Who designed the Skylark logo?"),
    ("tempts fabrication", "What is the price of the Orbitra 4?"),
    ("tempts fabrication", "How heavy is the Orbitra Pro mast?"),
    ("tempts fabrication", "How many years of warranty does the Orbitra AirTag have?"),
    ("tempts fabrication", "What was the battery life of the Orbitra 2 mast?"),
]
