"""Secrets never leave the process: not in stored events, plans or approvals, not in logs, not in what the CLI prints.

A key is put in the environment (``OPENAI_API_KEY=sk-test-<random>``), and
tools return it and fail with it in their error; the run is recorded into a
SQLite store through the engine and through the CLI. The key's bytes must
appear nowhere: the database file and its WAL, the CLI's output, the logs,
the JSON exports (``show --json``, ``logs --json``); the redaction marker
must.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import secrets as random
import time
import urllib.parse
from pathlib import Path

import pytest
from pydantic import BaseModel

from planexec import Engine, Plan, Registry
from planexec.cli.main import main
from planexec.engine.recording import record_run
from planexec.records import Record
from planexec.secrets import MIN_LENGTH, RedactingFilter, Secrets, redact, refresh_secrets, register_secret
from planexec.store import SqliteRunStore, verify_run

MARKER = "[redacted:OPENAI_API_KEY]"

TOOLS = '''
import os
from planexec import tool


@tool
def reveal() -> str:
    """Says the key out loud."""
    return "the key is " + os.environ["OPENAI_API_KEY"]


@tool
def parrot(text: str) -> dict:
    """Returns what it was given, under the key's name too."""
    return {"said": text, os.environ["OPENAI_API_KEY"]: "as a key"}


@tool
def encode() -> dict:
    """Returns the key written in other ways: encoded, reversed, upper-case, in halves."""
    import base64, urllib.parse
    key = os.environ["OPENAI_API_KEY"]
    raw = key.encode()
    half = len(key) // 2
    return {
        "base64": base64.b64encode(raw).decode(),
        "urlsafe": base64.urlsafe_b64encode(b"?>" + raw).decode().rstrip("="),
        "hex": raw.hex().upper(),
        "url": urllib.parse.quote("k=" + key + "/x", safe=""),
        "reversed": key[::-1],
        "upper": key.upper(),
        "halves": [key[:half], key[half:]],
    }


@tool
def leak_error(text: str) -> str:
    """Fails, naming the key in its error."""
    raise RuntimeError("login refused for key " + os.environ["OPENAI_API_KEY"] + " after " + text)
'''

PLAN = {
    "plan_id": "leaky",
    "goal": "use the service",
    "steps": [
        {"id": "reveal", "action": "reveal", "worker": "tool"},
        {"id": "parrot", "action": "parrot", "worker": "tool", "parameters": {"text": "${reveal}"}},
        {"id": "fail", "action": "leak_error", "worker": "tool", "parameters": {"text": "${parrot.said}"}},
    ],
}


ENCODED = {"plan_id": "encoded", "goal": "show the key", "steps": [{"id": "encode", "action": "encode", "worker": "tool"}]}


def forms(key: str) -> dict[str, str]:
    """Texts that give the key away: 16 characters of it or of it reversed, its hex, its base64 at each alignment
    (both alphabets), its URL encoding; each lower-cased except base64 (compare with `leaked`)."""
    raw = key.encode()
    found = {}
    for label, text in {"key": key, "reversed": key[::-1]}.items():
        found |= {f"{label}[{i}:]": text[i : i + 16].lower() for i in range(len(text) - 15)}
    found["hex"] = raw.hex()
    for k in range(3):
        middle = base64.b64encode(b"\0" * k + raw).decode()[4:-4]
        found[f"base64+{k}"] = middle
        found[f"urlsafe+{k}"] = middle.translate(str.maketrans("+/", "-_"))
    found["url"] = urllib.parse.quote(key, safe="").lower()
    return found


def leaked(text: str, key: str) -> list[str]:
    """Which forms of the key are in `text` (none, when redaction works)."""
    folded = text.lower()
    return [label for label, form in forms(key).items() if form in (text if label.startswith(("base64", "urlsafe")) else folded)]


@pytest.fixture
def key(monkeypatch):
    """A fresh key in the environment, read by the process's secrets; forgotten afterwards."""
    value = "sk-test-" + random.token_hex(16)
    monkeypatch.setenv("OPENAI_API_KEY", value)
    refresh_secrets()
    yield value
    monkeypatch.delenv("OPENAI_API_KEY")
    refresh_secrets()


@pytest.fixture
def project(tmp_path, monkeypatch, key):
    """A folder with the tools module and the plan file; the CLI runs there."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "leaky.py").write_text(TOOLS)
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    (tmp_path / "encoded.json").write_text(json.dumps(ENCODED))
    return tmp_path


def stored_bytes(path: Path) -> bytes:
    """The database file and its WAL (and shared memory), as an attacker reading the folder sees them."""
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


def registry(folder: Path) -> Registry:
    reg = Registry()
    reg.load_module(str(folder / "leaky.py"))
    return reg


# --- redact ---------------------------------------------------------------------------------------


def test_redact_hides_every_occurrence_nested_and_in_keys(key):
    value = {"a": f"x{key}y{key}", key: [1, (f"in a tuple {key}",)], "n": None, "b": b"bytes " + key.encode()}
    hidden = redact(value)
    assert hidden == {"a": f"x{MARKER}y{MARKER}", MARKER: [1, (f"in a tuple {MARKER}",)], "n": None, "b": b"bytes " + MARKER.encode()}
    assert key not in json.dumps(hidden, default=str)


def test_a_value_without_a_secret_comes_back_as_the_same_object(key):
    value = {"a": ["b", {"c": 1}], "d": "e"}
    assert redact(value) is value
    assert redact("plain") == "plain"


def test_records_and_pydantic_models_are_rebuilt_with_the_secret_hidden(key):
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Note(Record):
        text: str
        tags: list[str]

    class Answer(BaseModel):
        value: str
        note: Note

    answer = Answer(value=f"key={key}", note=Note(text="fine", tags=[key]))
    hidden = redact(answer)
    assert isinstance(hidden, Answer) and hidden.value == f"key={MARKER}" and hidden.note == Note(text="fine", tags=[MARKER])
    assert answer.value == f"key={key}"  # the original is left alone


def test_which_values_are_secrets():
    env = {
        "OPENAI_API_KEY": "sk-1234567890",
        "github_token": "ghp_abcdefgh",
        "DB_PASSWORD": "hunter2hunter2",
        "SHORT_TOKEN": "1234567",  # under MIN_LENGTH: it would match ordinary text
        "GIT_AUTHOR_NAME": "Ada Lovelace",  # AUTHOR is not AUTH
        "HOME": "/home/somebody",
        "X_AUTH": "bearer-abcdefgh",
    }
    found = Secrets(env)
    assert found.names() == ["DB_PASSWORD", "OPENAI_API_KEY", "X_AUTH", "github_token"]
    assert found.redact("Ada Lovelace at /home/somebody uses 1234567") == "Ada Lovelace at /home/somebody uses 1234567"
    found.register("a-registered-value", "my key")
    found.register("short", "ignored")
    assert found.redact("a-registered-value and short") == "[redacted:my key] and short"
    assert len("short") < MIN_LENGTH


def test_a_secret_inside_another_is_hidden_whole():
    found = Secrets({"A_KEY": "abcdefgh", "B_KEY": "abcdefgh-longer"})
    assert found.redact("abcdefgh-longer, abcdefgh") == "[redacted:B_KEY], [redacted:A_KEY]"


def test_a_secret_with_a_quote_or_backslash_is_hidden_where_json_text_in_a_string_escapes_it(tmp_path):
    secret = 'Tr0ub"4d\\r&3x-long'  # a quote and a backslash: JSON writes them \" and \\
    found = Secrets({"DB_PASSWORD": secret})
    draft = json.dumps({"steps": [{"id": "s1", "parameters": {"password": secret}}]})  # a planner's draft, as text
    assert secret not in draft and found.redact(draft) == draft.replace(json.dumps(secret)[1:-1], "[redacted:DB_PASSWORD]")
    assert found.redact(f"plain {secret}") == "plain [redacted:DB_PASSWORD]"


def test_a_secret_written_another_way_is_hidden_too(key):
    raw = key.encode()
    written = {
        "base64": base64.b64encode(raw).decode(),
        "base64 without padding, URL-safe": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "upper case": key.upper(),
        "lower case": key.lower(),
        "URL-encoded": urllib.parse.quote(f"k={key}&x=/", safe=""),
        "reversed": key[::-1],
        "first half": key[: len(key) // 2],
        "second half": key[len(key) // 2 :],
        "16 characters from the middle": key[10:26],
    }
    for k in range(3):  # inside a longer base64 text, at each of the three byte alignments, followed by more
        for prefix in (random.token_bytes(k), random.token_bytes(k + 3)):
            written[f"inside base64 after {len(prefix)} bytes"] = base64.b64encode(prefix + raw + b"and more").decode()
            written[f"inside URL-safe base64 after {len(prefix)} bytes"] = base64.urlsafe_b64encode(prefix + raw).decode()
    for how, text in written.items():
        shown = redact(f"look: {text}.")
        assert MARKER in shown and leaked(shown, key) == [], how
        assert redact(shown) == shown, how  # nothing left that looks like the key


def test_a_short_secret_is_hidden_whole_and_encoded_but_not_in_parts_or_mixed_case():
    found = Secrets({"PIN_TOKEN": "hunter22"})
    hidden = "[redacted:PIN_TOKEN]"
    assert found.redact("hunter22 HUNTER22 22retnuh aHVudGVyMjI= 68756e7465723232") == f"{hidden} {hidden} {hidden} {hidden}= {hidden}"
    assert found.redact("Hunter22 hunter2 the hunter") == "Hunter22 hunter2 the hunter"


def test_redacting_a_megabyte_with_three_secrets_is_quick():
    keys = {f"K{i}_KEY": "sk-test-" + random.token_hex(16) for i in range(3)}
    found = Secrets(keys)
    text = (random.token_urlsafe(560_000) + keys["K1_KEY"] + "lorem ipsum dolor " * 1000)[:1_000_000]
    found.redact("warm up")
    started = time.perf_counter()
    shown = found.redact(text)
    took = time.perf_counter() - started
    assert "[redacted:K1_KEY]" in shown and leaked(shown, keys["K1_KEY"]) == []
    assert took < 0.5  # measured: ~20 ms on one core (see the report); generous on a shared machine


def test_api_keys_are_registered_where_they_are_resolved(monkeypatch):
    from planexec.models.openai import OpenAIModel

    given = "sk-given-" + random.token_hex(8)
    OpenAIModel("gpt-4o-mini", api_key=given)
    assert redact(f"the key {given}") == "the key [redacted:openai:gpt-4o-mini api_key]"
    from planexec.config import Config
    from planexec.models.settings import ModelSettings

    configured = "sk-configured-" + random.token_hex(8)
    config = Config.model_validate({"providers": {"openai": {"api_key_env": "MY_SERVER_SETTING"}}})
    ModelSettings(config, env={"MY_SERVER_SETTING": configured}).options("openai")
    assert redact(configured) == "[redacted:MY_SERVER_SETTING]"
    register_secret(None, "nothing")  # a missing key is no secret


def test_redaction_is_cheap(key):
    event = {"type": "step_succeeded", "output": {"value": ["lorem ipsum dolor sit amet " * 4] * 90, "meta": {"n": 1}}}
    assert 9_000 < len(json.dumps(event)) < 11_000
    rounds = 200
    started = time.perf_counter()
    for _ in range(rounds):
        redact(event)
    per_event = (time.perf_counter() - started) / rounds
    assert per_event < 0.005  # measured: ~0.1 ms with a secret set (see the report); generous on a shared machine


# --- logs -------------------------------------------------------------------------------------------


def test_log_records_of_planexec_loggers_are_redacted_messages_arguments_and_tracebacks(key, caplog):
    caplog.set_level(logging.DEBUG)
    try:
        raise RuntimeError(f"refused {key}")
    except RuntimeError:
        logging.getLogger("planexec.store").exception("could not log in with %s", key)
    logging.getLogger("planexec").warning(f"the key is {key}")
    logging.getLogger("planexec.engine").info(
        "in hex %s, reversed %s, in base64 %s", key.encode().hex(), key[::-1], base64.b64encode(key.encode())
    )
    assert key not in caplog.text and MARKER in caplog.text and leaked(caplog.text, key) == []
    assert all(key not in r.getMessage() for r in caplog.records)
    assert any(isinstance(f, RedactingFilter) for f in logging.getLogger("planexec").filters)


# --- a run recorded through the engine ------------------------------------------------------------------


def test_a_run_through_the_engine_stores_no_secret(project, key, caplog):
    caplog.set_level(logging.DEBUG)
    path = project / "store" / "runs.db"

    def noisy(event):  # an event subscriber that fails: the engine logs its traceback
        if event.type == "step_failed":
            raise ValueError(f"subscriber saw {event.error.message}")

    async def go():
        with SqliteRunStore(path) as store:
            run = Engine(registry(project)).start(Plan.from_data(PLAN), run_id="run-1")
            record_run(run, store)
            run.subscribe(noisy)
            result = await run.result()
            store.request_approval("run-1", "sha256:x", step_id="fail")
            store.decide_approval("run-1", step_id="fail", approved=False, by="ada", reason=f"it leaked {key}")
            store.save_plan("run-1", Plan.from_data({**PLAN, "goal": f"use {key}"}).model_copy(update={"version": 2}))
            return result

    result = asyncio.run(go())
    assert key in json.dumps(result.model_dump(mode="json"))  # the run itself saw the key: the tools returned it
    assert result.steps["fail"].error is not None
    data = stored_bytes(path)
    assert key.encode() not in data and MARKER.encode() in data
    assert key not in caplog.text and "subscriber saw" in caplog.text and MARKER in caplog.text
    with SqliteRunStore(path) as store:
        events = store.events("run-1")
        assert key not in json.dumps([e.to_dict() for e in events]) and MARKER in json.dumps([e.to_dict() for e in events])
        assert store.run("run-1").reason is None or key not in store.run("run-1").reason
        assert store.approvals("run-1")[0].reason == f"it leaked {MARKER}"
        assert store.plan_versions("run-1")[-1].plan.goal == f"use {MARKER}"
        assert verify_run(store, "run-1").ok  # what is chained is what is stored: the redacted records


# --- a run through the CLI ----------------------------------------------------------------------------


def test_a_run_through_the_cli_prints_and_stores_no_secret(project, key, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    db = project / "cli.db"
    code = main(["run", "--plan", "plan.json", "--tools", "leaky.py", "--yes", "--store", str(db), "--run-id", "run-9"])
    assert code == 1  # the last step fails
    printed = capsys.readouterr()
    outputs = {"run": printed.out + printed.err}
    for name, argv in {
        "show": ["show", "run-9"],
        "show --json": ["show", "run-9", "--json"],
        "logs": ["logs", "run-9"],
        "logs --json": ["logs", "run-9", "--json"],
        "runs --json": ["runs", "--json"],
    }.items():
        assert main([*argv, "--store", str(db)]) == 0, name
        printed = capsys.readouterr()
        outputs[name] = printed.out + printed.err
    for name, text in outputs.items():
        assert key not in text, name
    assert MARKER in outputs["run"] and MARKER in outputs["show"] and MARKER in outputs["logs"]
    export = json.loads(outputs["show --json"])  # the JSON export of the run
    assert MARKER in json.dumps(export) and export["steps"]["fail"]["state"] == "failed"
    assert all(key not in line for line in outputs["logs --json"].splitlines())
    data = stored_bytes(db)
    assert key.encode() not in data and MARKER.encode() in data
    assert key not in caplog.text


def test_a_key_a_tool_returns_encoded_reaches_neither_the_store_nor_what_the_cli_prints(project, key, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    db = project / "encoded.db"
    assert main(["run", "--plan", "encoded.json", "--tools", "leaky.py", "--yes", "--store", str(db), "--run-id", "run-e"]) == 0
    printed = capsys.readouterr()
    outputs = {"run": printed.out + printed.err}
    for name, argv in {
        "show": ["show", "run-e"],
        "show --json": ["show", "run-e", "--json"],
        "logs": ["logs", "run-e"],
        "logs --json": ["logs", "run-e", "--json"],
    }.items():
        assert main([*argv, "--store", str(db)]) == 0, name
        printed = capsys.readouterr()
        outputs[name] = printed.out + printed.err
    for name, text in outputs.items():
        assert leaked(text, key) == [], name
    assert MARKER in outputs["show"] and MARKER in outputs["logs --json"]
    export = json.loads(outputs["show --json"])
    assert export["steps"]["encode"]["state"] == "succeeded"
    assert leaked(stored_bytes(db).decode("utf-8", "replace"), key) == []
    assert leaked(caplog.text, key) == []


def test_a_variable_that_says_where_a_key_is_kept_is_not_itself_hidden():
    # RAY_AUTH_TOKEN_PATH is a path: hiding every 16 characters of it hid the test folder in a tools file's path
    from planexec.secrets import Secrets

    found = Secrets({"RAY_AUTH_TOKEN_PATH": "/tmp/pytest-of-root/pytest-1/ray/token", "API_KEY": "sk-live-0123456789abcdef"})
    assert found.names() == ["API_KEY"]
