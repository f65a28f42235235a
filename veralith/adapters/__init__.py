"""Integrations that turn the calls an app already makes into Veralith traces.

langchain: a LangChain callback handler; llamaindex: handlers on LlamaIndex's instrumentation
dispatcher; openai: a proxy of an OpenAI client. What they share (the metadata shape, counters,
how a trace is logged or handed to an enclosing @veralith.trace call) is in _common. None of them
is imported by `import veralith`; each loads its framework only when installed or used.
"""
