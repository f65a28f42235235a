"""Secrets never leave through a URL, an echo, the reply cache or a `.env` that redirects the judge."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai_server import Reply
from fakes import DictCache

from veralith.config import ConfigError, load_settings, settings
from veralith.errors import JudgeCallError
from veralith.llm.client import OpenAIClient
from veralith.llm.tasks import QUESTIONS, QuestionsInput
from veralith.redact import redact, redact_url
from veralith.store import ops

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-realkey-1234567890abcdef"


# ---------------------------------------------------------------- user info in a base URL

def test_user_info_without_a_scheme_is_masked():
    assert "secret" not in redact_url("user:secret@host/v1")
    assert redact_url("user:secret@host/v1") == "***@host/v1"
    assert "secret" not in redact("server user:secret@host:8000/v1 is down")
    assert redact("mail bob@example.com") == "mail bob@example.com"   # an address is not a credential
    with pytest.raises(ConfigError) as info:
        load_settings({"VERALITH_BASE_URL": "user:secret@host/v1"})
    assert "VERALITH_BASE_URL" in str(info.value) and "secret" not in str(info.value)


@pytest.mark.parametrize("userinfo", ["bob:hunter2pw", "hunter2pw"])
def test_user_info_in_the_base_url_is_refused_before_any_request(openai_server, caplog, userinfo):
    url = openai_server.base_url.replace("http://", f"http://{userinfo}@")
    with pytest.raises(ConfigError) as info:
        load_settings({"VERALITH_BASE_URL": url})
    message = str(info.value)
    assert "VERALITH_BASE_URL" in message and "VERALITH_API_KEY" in message and "hunter2pw" not in message
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigError) as direct:
        OpenAIClient(base_url=url, api_key=KEY, max_retries=0).run(QUESTIONS, QuestionsInput(query="Why?"))
    assert "hunter2pw" not in str(direct.value)
    assert openai_server.count == 0   # so no `Authorization: Basic` and no httpx log line carrying it
    assert "hunter2pw" not in caplog.text


# ---------------------------------------------------------------- a server echoing the key

def test_a_key_echoed_in_an_error_body_is_masked_even_where_the_message_is_cut(openai_server):
    openai_server.enqueue(Reply.error(401, message="x" * 255 + " your key " + KEY))
    client = OpenAIClient(base_url=openai_server.base_url, api_key=KEY, max_retries=0)
    with pytest.raises(JudgeCallError) as info:
        client.run(QUESTIONS, QuestionsInput(query="Why?"))
    assert KEY[:10] not in info.value.message and "***" in info.value.message


def test_a_key_echoed_where_the_debug_log_cuts_an_error_is_masked(openai_server, caplog):
    """The debug line of a failed attempt is cut to 500 characters: masked first, then cut, so a key the
    cut falls inside leaves no piece of itself."""
    caplog.set_level(logging.DEBUG, logger="veralith.llm.requests")
    client = OpenAIClient(base_url=openai_server.base_url, api_key=KEY, max_retries=0)

    def attempt_line(message: str) -> str:
        caplog.clear()
        openai_server.enqueue(Reply.error(400, message=message))
        with pytest.raises(JudgeCallError):
            client.run(QUESTIONS, QuestionsInput(query="Why?"))
        (line,) = [r.getMessage() for r in caplog.records if "attempt 1 failed" in r.getMessage()]
        return line.split("attempt 1 failed: ", 1)[1]

    before = attempt_line("MARK" + "x" * 600).index("MARK")   # where the body starts in what is cut
    shown = attempt_line("y" * (500 - before - 10) + KEY + " " + "z" * 600)
    assert KEY[:8] not in shown and "***" in shown, shown[-60:]


def test_a_key_echoed_in_an_error_body_is_masked_in_the_stored_result(openai_server):
    openai_server.enqueue(*[Reply.error(400, message=f"bad request from Bearer {KEY}")] * 2)
    from veralith.pipeline.evaluate import evaluate

    with settings.override(backend="openai", base_url=openai_server.base_url, api_key=KEY, max_retries=0):
        result = evaluate("Why?", ["Because."], "Because.")
    from veralith.store import open_store

    stored = open_store().read(ops.load_result, result.trace_id)
    assert stored.errors and all(KEY[:10] not in e.message for e in stored.errors)


def test_a_key_echoed_in_a_200_reply_never_reaches_the_cache_or_the_result(openai_server):
    cache = DictCache()
    client = OpenAIClient(base_url=openai_server.base_url, api_key=KEY, max_retries=0, cache=cache)
    openai_server.enqueue({"sub_questions": [{"id": "q1", "text": f"Why? Authorization: Bearer {KEY}"}]})
    result = client.run(QUESTIONS, QuestionsInput(query="Why?"))
    assert KEY not in json.dumps(dict(cache)) and KEY[:10] not in json.dumps(dict(cache))
    assert KEY not in result.output.model_dump_json()


# ---------------------------------------------------------------- .env

def _run_cli(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    clean["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "veralith.cli", *args], cwd=cwd, env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


def _one_trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"query": "How tall is it?", "context": ["It is 330 metres tall."],
                                "response": "It is 330 metres tall."}) + "\n", encoding="utf-8")
    return path


def test_a_dotenv_that_only_moves_the_server_does_not_get_the_environment_key(openai_server, tmp_path):
    (tmp_path / ".env").write_text(f"VERALITH_BASE_URL={openai_server.base_url}\nVERALITH_BACKEND=openai\n")
    done = _run_cli(tmp_path, {"OPENAI_API_KEY": KEY}, "eval", str(_one_trace(tmp_path)), "--no-persist")
    assert done.returncode == 0, done.stderr
    assert openai_server.count > 0
    assert all(KEY not in (h.get("authorization") or "") for h in openai_server.headers)
    assert ".env" in done.stderr and "OPENAI_API_KEY" in done.stderr and KEY not in done.stderr


def test_a_dotenv_that_moves_the_server_and_sets_the_key_sends_that_key(openai_server, tmp_path):
    (tmp_path / ".env").write_text(f"VERALITH_BASE_URL={openai_server.base_url}\nVERALITH_BACKEND=openai\n"
                                   "VERALITH_API_KEY=sk-from-the-dotenv-5678\n")
    done = _run_cli(tmp_path, {"OPENAI_API_KEY": KEY}, "eval", str(_one_trace(tmp_path)), "--no-persist")
    assert done.returncode == 0, done.stderr
    assert {h.get("authorization") for h in openai_server.headers} == {"Bearer sk-from-the-dotenv-5678"}


def test_an_exported_server_keeps_the_exported_key(openai_server, tmp_path):
    env = {"OPENAI_API_KEY": KEY, "VERALITH_BASE_URL": openai_server.base_url, "VERALITH_BACKEND": "openai"}
    done = _run_cli(tmp_path, env, "eval", str(_one_trace(tmp_path)), "--no-persist")
    assert done.returncode == 0, done.stderr
    assert {h.get("authorization") for h in openai_server.headers} == {f"Bearer {KEY}"}


def test_a_dotenv_that_is_not_utf8_is_one_line_and_exit_2(tmp_path):
    (tmp_path / ".env").write_bytes(b"VERALITH_BACKEND=local\nVERALITH_RUN=caf\xe9\n")
    done = _run_cli(tmp_path, {}, "list")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and ".env" in lines[0] and "UTF-8" in lines[0] and "Traceback" not in done.stderr
