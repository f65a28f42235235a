"""Veralith: diagnose why a RAG answer went wrong."""
