"""The sample app runs start to finish offline and leaves traces in several cells."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("chromadb")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # sample_app lives in the checkout and is not part of the installed package
    sys.path.insert(0, str(REPO))

# Installed as sitecustomize in every child process: any connection or name lookup that is not
# loopback fails, and chromadb's default ONNX model (a download) cannot even be constructed.
NO_NETWORK = textwrap.dedent("""
    import socket

    _LOCAL = ("127.0.0.1", "::1", "localhost")
    _connect, _getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def _guarded_connect(self, address, *args):
        if isinstance(address, tuple) and address[0] not in _LOCAL:
            raise OSError(f"network is off in this test: {address}")
        return _connect(self, address, *args)

    def _guarded_getaddrinfo(host, *args, **kwargs):
        if host not in _LOCAL and host is not None:
            raise OSError(f"network is off in this test: lookup of {host}")
        return _getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = _guarded_connect
    socket.getaddrinfo = _guarded_getaddrinfo

    try:
        from chromadb.utils.embedding_functions import onnx_mini_lm_l6_v2 as _onnx

        def _no_download(self, *args, **kwargs):
            raise RuntimeError("chromadb tried to use its default ONNX model")

        _onnx.ONNXMiniLM_L6_V2.__init__ = _no_download
    except ImportError:
        pass
""")


@pytest.fixture
def offline_env(tmp_path):
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(NO_NETWORK)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "VERALITH_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(guard), str(REPO)]), VERALITH_BACKEND="local",
               HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    return env


def _run(args, env, cwd, timeout=600):
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_the_demo_runs_offline_and_lands_in_several_cells(tmp_path, offline_env):
    done = _run(["-m", "sample_app", "--data-dir", "chroma", "--db", "demo.db"], offline_env, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "answerer=extractive" in done.stdout
    assert "veralith stats" in done.stdout and "complete_grounded" in done.stdout

    with sqlite3.connect(tmp_path / "demo.db") as db:
        rows = db.execute("SELECT status, failure_cell FROM traces WHERE knowledge_base = 'orbitra'").fetchall()
    from sample_app.questions import QUESTIONS

    assert len(rows) == len(QUESTIONS)
    assert {status for status, _ in rows} == {"done"}
    assert len({cell for _, cell in rows}) >= 3, rows
    # The answerer retells another product's facts under the name it was asked about: the diagnosis
    # must call every such fabrication ungrounded, never healthy.
    with sqlite3.connect(tmp_path / "demo.db") as db:
        fabricated = db.execute("SELECT query, response, failure_cell FROM traces WHERE knowledge_base = 'orbitra'"
                                " AND query IN ('What is the price of the Orbitra 4?',"
                                " 'How heavy is the Orbitra Pro mast?')").fetchall()
    assert len(fabricated) == 2
    for query, response, cell in fabricated:
        assert cell.endswith("_ungrounded"), (query, response, cell)

    # A fresh process reopens the index without being told the embedding function, and nothing
    # is downloaded: chromadb rebuilds the registered one from the collection's stored config.
    probe = textwrap.dedent("""
        from pathlib import Path
        from sample_app.embedding import HashingEmbeddingFunction
        from sample_app.index import open_collection, retrieve
        collection = open_collection(Path("chroma"))
        assert isinstance(collection.configuration["embedding_function"], HashingEmbeddingFunction)
        print(retrieve(collection, "How long do the mast batteries last?", k=1)[0]["id"])
    """)
    reopened = _run(["-c", probe], offline_env, tmp_path)
    assert reopened.returncode == 0, reopened.stderr[-3000:]
    assert reopened.stdout.strip() == "battery"


def test_the_script_form_runs_too(tmp_path, offline_env):
    done = _run([str(REPO / "sample_app" / "run.py"), "--help"], offline_env, tmp_path)
    assert done.returncode == 0 and "--data-dir" in done.stdout


def test_the_extractive_answerer_quotes_refuses_and_confabulates_only_when_asked_to():
    from sample_app.answer import REFUSAL, ExtractiveAnswerer

    context = [{"id": "price", "text": "The Orbitra 3 costs 189 euros. Shipping is free.", "source": "price.md"}]
    answerer = ExtractiveAnswerer()
    assert answerer.answer("Is shipping free?", context) == "Shipping is free."
    assert answerer.answer("Who designed the logo?", context) == REFUSAL
    assert answerer.answer("What does the Orbitra 4 cost?", context) == "The Orbitra 4 costs 189 euros."
    assert ExtractiveAnswerer(guess=False).answer("What does the Orbitra 4 cost?", context) == REFUSAL


def test_the_embedding_function_round_trips_its_config_and_is_deterministic():
    from sample_app.embedding import HashingEmbeddingFunction

    ef = HashingEmbeddingFunction(dim=64)
    rebuilt = HashingEmbeddingFunction.build_from_config(ef.get_config())
    assert rebuilt.dim == 64 and HashingEmbeddingFunction.name() == "veralith_sample_hashing"
    [a, b] = ef(["battery life of the mast", "battery life of the mast"])
    assert list(a) == list(b) and abs(sum(x * x for x in a) - 1) < 1e-6
    assert len(ef(["the and of"])[0]) == 64  # stopwords only still embeds


def test_the_openai_answerer_grounds_its_prompt_in_the_passages(openai_server, monkeypatch):
    from sample_app.answer import REFUSAL, make_answerer

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    openai_server.enqueue("Shipping within the EU is free.")
    answerer = make_answerer("auto")
    assert answerer.name == "openai"
    context = [{"id": "price", "text": "Shipping within the European Union is free.", "source": "price.md"}]
    assert answerer.answer("Is shipping free?", context) == "Shipping within the EU is free."
    [request] = openai_server.requests
    system, user = (m["content"] for m in request["messages"])
    assert REFUSAL in system and "[price] Shipping within the European Union is free." in user
    assert user.endswith("Question: Is shipping free?")
    monkeypatch.delenv("OPENAI_API_KEY")
    assert make_answerer("auto").name == "extractive"
