"""A small RAG app over the (fictional) Orbitra 3 weather-station documentation, traced by Veralith.

Runs offline: chromadb with a hashing embedding function, an extractive answerer, local judges.
See sample_app/README.md.
"""
