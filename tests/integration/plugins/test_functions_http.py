"""The signal tool and the function state machine over HTTP and the CLI, on a real Redis."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers import InvalidEvent, SessionClient
from producers.http.app import create_web_app
from producers.http.routes.sessions import MAX_SESSION_FUNCTIONS
from sessions.signals import SIGNAL_TYPES
from sessions.store import session_scope
from tests.conftest import ROOT, wait_for
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration
FUNCTIONS = ROOT / "examples" / "functions"


@pytest.fixture
def client(make_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings(functions_dir=str(FUNCTIONS)))) as c:
        yield c


class TestSignalTool:
    def test_texts_and_validation(self, client: TestClient) -> None:
        """The tool answers with rolebox's text; a bad type or payload is a 422 naming the field."""
        sdk = SessionClient(client=client)
        assert sdk.signal("s1", "answer") == "signal: answer acknowledged (no active functions)"
        sdk.configure("s1", functions=["approval"])
        assert sdk.signal("s1", "handoff", {"subagent": "coder"}) == (
            "signal: handoff acknowledged | recorded on 1 function(s) | → handoff to coder"
        )
        bad = client.post("/v1/sessions/s1/signal", json={"type": "done"})
        assert bad.status_code == 422
        assert bad.json()["error"]["message"].startswith(
            'Unrecognized signal type: "done". Valid types: answer,'
        )
        assert bad.json()["error"]["field"] == "type"
        payload = client.post("/v1/sessions/s1/signal", json={"type": "answer", "payload": [1, 2]})
        assert payload.status_code == 422 and payload.json()["error"]["field"] == "payload"
        with pytest.raises(InvalidEvent):
            sdk.configure("s1", functions=["ghost"])

    def test_a_null_payload_is_refused_as_an_array_is(self, client: TestClient) -> None:
        """An audit (finding 5): ``"payload": null`` was answered 200 and recorded; the tool's schema takes an
        object or nothing, so it is the same 422 as ``[1]``, naming ``payload``, and nothing is recorded. An
        absent payload and ``{}`` are still payloads' absence and an empty payload."""
        SessionClient(client=client).configure("sx1", functions=["approval"])
        array = client.post("/v1/sessions/sx1/signal", json={"type": "answer", "payload": [1]})
        null = client.post("/v1/sessions/sx1/signal", json={"type": "answer", "payload": None})
        assert null.status_code == array.status_code == 422
        assert null.json()["error"]["field"] == "payload"
        assert null.json()["error"]["code"] == array.json()["error"]["code"]
        assert client.get("/v1/sessions/sx1/state").json()["sessionLedger"] == {}
        assert client.post("/v1/sessions/sx1/signal", json={"type": "progress"}).status_code == 200
        assert (
            client.post("/v1/sessions/sx1/signal", json={"type": "answer", "payload": {}}).status_code == 200
        )
        state = client.get("/v1/sessions/sx1/state").json()
        assert state["sessionLedger"] == {"progress": None, "answer": {}}
        assert state["functions"]["approval"]["ledger"] == {"progress": None, "answer": {}}

    def test_concurrent_signals_lose_nothing(self, client: TestClient) -> None:
        """20 concurrent signals on one session: every one is applied (ledger has every type, 20 recorded calls)."""
        sdk = SessionClient(client=client)
        sdk.configure("busy", functions=["approval"])
        calls = [(SIGNAL_TYPES[i % 8], {"i": i}) for i in range(20)]
        with ThreadPoolExecutor(20) as pool:
            list(pool.map(lambda c: sdk.signal("busy", c[0], c[1]), calls))
        state = sdk.state("busy")
        ledger = state["functions"]["approval"]["ledger"]
        assert set(ledger) == set(SIGNAL_TYPES)
        for signal_type, payload in ledger.items():
            assert payload["i"] % 8 == SIGNAL_TYPES.index(signal_type)
        assert set(state["sessionLedger"]) == set(SIGNAL_TYPES)
        producer = client.app.state.producer  # type: ignore[attr-defined]
        assert (
            producer.store.stats(producer.keys)["accepted"] == 20
        )  # one agent.signal.emitted event per call, none lost
        with ThreadPoolExecutor(20) as pool:
            list(pool.map(lambda i: sdk.turn("busy", user_messaged=False), range(20)))
        assert (
            sdk.state("busy")["functions"]["approval"]["currentTurn"] == 20
        )  # 20 read-modify-writes, none lost

    def test_attention_items(self, client: TestClient) -> None:
        """A pausing signal is a needs-attention item until the function leaves the gated phase."""
        sdk = SessionClient(client=client)
        sdk.configure("att", functions=["approval"])
        sdk.signal("att", "need_approval", {"plan": "drop a column"})
        items = client.get("/v1/sessions/att/attention").json()["items"]
        assert [(i["function"], i["type"], i["payload"]) for i in items] == [
            ("approval", "need_approval", {"plan": "drop a column"})
        ]
        sdk.turn("att", user_messaged=False)
        assert client.get("/v1/sessions/att/attention").json()["items"] != []
        sdk.turn("att", user_messaged=True)  # the gate reopens on the user's answer
        assert client.get("/v1/sessions/att/attention").json()["items"] == []
        state = sdk.state("att")
        assert state["hitl"] == {"type": "need_approval", "payload": {"plan": "drop a column"}}

    def test_signal_is_a_source_event(self, make_settings: Any, start_worker: Any) -> None:
        """Each signal call becomes an agent.signal.emitted chain on the session's scope."""
        settings = make_settings(functions_dir=str(FUNCTIONS))
        start_worker(settings)
        with TestClient(create_web_app(settings)) as client:
            SessionClient(client=client).signal("ev", "progress", {"pct": 10})
            producer = client.app.state.producer  # type: ignore[attr-defined]
            (record,) = client.get("/v1/events", params={"sourceType": "agent.signal.emitted"}).json()[
                "events"
            ]
            # the source id: signal:<session>:<its incarnation>:<its first recorded call>
            assert record["chainId"].startswith("chain:signal:ev:") and record["chainId"].endswith(":1")
            chain = wait_for(
                lambda: producer.store.get_chain(producer.keys, record["chainId"]), what="the chain"
            )
        assert chain["envelope"]["source"]["sourceType"] == "agent.signal.emitted"
        assert chain["envelope"]["source"]["scopeKey"] == "session:ev"
        assert chain["envelope"]["source"]["payload"]["output"].startswith("signal: progress acknowledged")


class TestApprovalWorkflow:
    def test_over_http(self, client: TestClient) -> None:
        """need_approval pauses; the gate reopens on the user's answer; continue_until completes."""
        sdk = SessionClient(client=client)
        sdk.configure("flow", functions=["approval"])
        sdk.turn("flow", user_messaged=True)
        assert sdk.idle("flow", nowMs=1)["continued"] is True
        sdk.signal("flow", "need_approval", {"plan": "x"})
        assert sdk.state("flow")["functions"]["approval"]["phase"] == "gated"
        assert sdk.idle("flow", nowMs=2)["continued"] is False
        sdk.turn("flow", user_messaged=True)
        client.put("/v1/sessions/flow/artifacts/approved_plan", json={"content": "x"})
        sdk.signal("flow", "answer")
        decision = sdk.idle("flow", nowMs=3)
        assert decision["completed"] == ["approval"] and decision["continued"] is False
        assert client.get("/v1/sessions/flow/artifacts").json()["approval_request"] == '{"plan":"x"}'

    def test_a_resolved_block_does_not_release_a_later_approval(self, client: TestClient) -> None:
        """An audit (finding 2): a ``blocked`` that the gate resolved left its 2-minute backstop behind, and an idle
        past it force-released a later ``need_approval`` (auto-continued past the human, attention item gone)."""
        sdk = SessionClient(client=client)
        sdk.configure("hold", functions=["approval"])
        sdk.signal("hold", "blocked", {"on": "ci"})
        sdk.turn("hold", user_messaged=False)  # the gate is open (no need_approval yet): the block is over
        assert sdk.state("hold")["functions"]["approval"]["phase"] == "active"
        sdk.signal("hold", "need_approval", {"plan": "deploy to prod"})
        sdk.turn("hold", user_messaged=False)
        a_day_later = int(time.time() * 1000) + 86_400_000
        decision = sdk.idle("hold", nowMs=a_day_later)
        assert decision["continued"] is False and decision["function"] is None
        assert sdk.state("hold")["functions"]["approval"]["phase"] == "gated"
        items = client.get("/v1/sessions/hold/attention").json()["items"]
        assert [(i["type"], i["payload"]) for i in items] == [("need_approval", {"plan": "deploy to prod"})]

    def test_simulate_cli(self) -> None:
        """The checked-in script runs end to end: one line per step, the approval completes."""
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "producers.cli",
                "functions",
                "simulate",
                "--functions",
                str(FUNCTIONS),
                "--script",
                str(ROOT / "examples" / "approval.steps.jsonl"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert [line["step"] for line in lines] == list(range(14))
        phases = [line["functions"]["approval"]["phase"] for line in lines]
        assert phases[5] == "gated" and phases[9] == "active" and phases[-1] == "complete"
        assert (
            lines[5]["result"]
            == "signal: need_approval acknowledged | recorded on 1 function(s) | → function paused"
        )
        assert lines[3]["result"]["reminder"].startswith("<system-reminder>[auto-continue 1/3 for approval:")
        assert lines[6]["result"] == {
            "continued": False,
            "function": None,
            "reason": "no function needs a continuation",
            "reminder": None,
            "completed": [],
        }
        assert lines[-1]["result"]["completed"] == ["approval"]
        assert lines[-1]["functions"]["approval"]["ledger"] == {
            "progress": None,
            "need_approval": {"plan": "drop column users.legacy_flag"},
            "answer": None,
        }
        # Signals without payload capture nothing (with one, any type would overwrite it: rolebox ignores when_args here).
        assert lines[-1]["artifacts"]["approval_request"] == '{"plan":"drop column users.legacy_flag"}'

    def test_simulate_bad_steps_do_not_stop(self, tmp_path: Any) -> None:
        """An unknown signal type gives the guard's text; a malformed step is reported with its line."""
        script = tmp_path / "s.jsonl"
        script.write_text(
            '{"activate": "approval"}\n{"signal": {"type": "finished"}}\n{"jump": 1}\n{"signal": {"type": "answer"}}\n'
        )
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "producers.cli",
                "functions",
                "simulate",
                "--functions",
                str(FUNCTIONS),
                "--script",
                str(script),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert lines[1]["result"].startswith('Unrecognized signal type: "finished". Valid types:')
        assert (
            lines[2]["result"] == {"error": "unknown step 'jump'"}
            and "line 3: unknown step 'jump'" in out.stderr
        )
        assert lines[3]["result"].startswith("signal: answer acknowledged | recorded on 1")
        assert out.returncode == 1

    def test_check_cli(self, tmp_path: Any) -> None:
        """functions check: exit 0 for the examples; exit 2 with file and field for a broken file."""
        ok = subprocess.run(
            [sys.executable, "-m", "producers.cli", "functions", "check", str(FUNCTIONS)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert ok.returncode == 0, ok.stdout + ok.stderr
        (tmp_path / "bad.md").write_text("---\nname: bad\ncontinue_max: lots\n---\n")
        bad = subprocess.run(
            [sys.executable, "-m", "producers.cli", "functions", "check", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert bad.returncode == 2
        assert bad.stdout.strip() == f"{tmp_path}/bad.md: continue_max: must be an integer >= 0"


def test_a_session_that_stays_contended_is_a_503_not_a_stack_trace(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every compare-and-set loses (another writer changes the session inside each attempt) → 503 busy."""
    from sessions.function_store import FunctionStore

    real_update = FunctionStore.update

    def contended(self: FunctionStore, session_id: str, change: Any) -> Any:
        self.max_retries = 3

        def change_and_interfere(rt: Any) -> Any:
            self.client.set(self._key(session_id), self.client.get(self._key(session_id)) or "{}")
            return change(rt)

        return real_update(self, session_id, change_and_interfere)

    client.post("/v1/sessions/c1/turn", json={})
    monkeypatch.setattr(FunctionStore, "update", contended)
    for path, body in (("turn", {}), ("signal", {"type": "answer"}), ("idle", {"nowMs": 1})):
        response = client.post(f"/v1/sessions/c1/{path}", json=body)
        assert response.status_code == 503, (path, response.text)
        assert response.json()["error"]["code"] == "busy"
        assert "changed under us 3 times" in response.json()["error"]["message"]


# A session's settings ``functions``: each known function once, a bounded list, and the stored list is the locked
# set as it stands.


@pytest.mark.parametrize(
    ("functions", "fragment"),
    [
        (["approval", "escalation", "approval"], "'approval' is there twice"),
        (["approval"] * (MAX_SESSION_FUNCTIONS + 1), f"at most {MAX_SESSION_FUNCTIONS} items"),
    ],
)
def test_a_function_named_twice_or_a_list_past_its_cap_is_refused(
    client: TestClient, redis_client: Redis, keys: BucketKeys, functions: list[str], fragment: str
) -> None:
    """600,000 copies of one known name were stored in the settings (6.6 MB a session, counted toward no
    quota); now a 422 naming ``functions``, nothing stored."""
    answer = client.put("/v1/sessions/s-big", json={"functions": functions})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "functions" and fragment in error["message"], error
    assert redis_client.exists(keys.session(session_scope("s-big"))) == 0


def test_the_settings_answer_the_locked_set_as_it_stands(
    client: TestClient, redis_client: Redis, keys: BucketKeys
) -> None:
    """``functions: []`` answered ``[]`` while the function stayed locked; a function the list drops is now
    unlocked (it stays active until a transition or a deactivate ends it)."""
    assert (
        client.put("/v1/sessions/s-lock", json={"functions": ["approval", "escalation"]}).status_code == 200
    )
    assert client.put("/v1/sessions/s-lock", json={"functions": ["escalation"]}).json()["functions"] == [
        "escalation"
    ]
    stored = json.loads(redis_client.get(keys.functions_state(session_scope("s-lock"))) or "{}")
    assert stored["locked"] == ["escalation"]
    assert sorted(stored["active"]) == ["approval", "escalation"]
    assert client.put("/v1/sessions/s-lock", json={"functions": []}).json()["functions"] == []
    stored = json.loads(redis_client.get(keys.functions_state(session_scope("s-lock"))) or "{}")
    assert stored["locked"] == []


def test_deactivating_a_function_nobody_defined_is_refused_as_activating_it_is(client: TestClient) -> None:
    for route in ("activate", "deactivate"):
        answer = client.post(f"/v1/sessions/s-ghost/functions/{route}", json={"name": "ghost"})
        assert answer.status_code == 422, (route, answer.text)
        assert (
            answer.json()["error"]["code"] == "unknown_function" and answer.json()["error"]["field"] == "name"
        )
        assert "AGENT_SIGNAL_FUNCTIONS_DIR" in answer.json()["error"]["message"]
    assert (
        client.post("/v1/sessions/s-ghost/functions/activate", json={"name": "approval"}).status_code == 200
    )
    ended = client.post("/v1/sessions/s-ghost/functions/deactivate", json={"name": "approval"})
    assert ended.status_code == 200 and ended.json()["active"] == []


def test_an_empty_functions_list_writes_no_function_state_where_nothing_is_locked(
    client: TestClient, redis_client: Redis, keys: BucketKeys
) -> None:
    """``{"functions": [], "dmailEnabled": true}`` on a session without function state wrote one (counted toward
    the user's quota, so at the quota the whole settings PUT was refused)."""
    answer = client.put("/v1/sessions/s-empty", json={"functions": [], "dmailEnabled": True})
    assert answer.status_code == 200 and answer.json()["dmailEnabled"] is True
    assert redis_client.exists(keys.functions_state(session_scope("s-empty"))) == 0


def test_an_idle_now_past_the_last_iso_instant_is_refused(client: TestClient) -> None:
    """A contract audit: ``nowMs`` 10**23 was taken; it is bounded as an event's timestamp is (below 2**53)."""
    client.post("/v1/sessions/n1/turn", json={})
    refused = client.post("/v1/sessions/n1/idle", json={"nowMs": 10**23})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "nowMs", refused.text
    assert client.post("/v1/sessions/n1/idle", json={"nowMs": 1}).status_code == 200


def test_with_no_definitions_loaded_an_unknown_function_says_how_to_load_them(make_settings: Any) -> None:
    """A newcomer's audit: against `make run` (no AGENT_SIGNAL_FUNCTIONS_DIR) activate answered "unknown function
    'approval'" and nothing more; the settings route worded it otherwise."""
    with TestClient(create_web_app(make_settings())) as bare:
        for path, body, field in (
            ("/v1/sessions/s-none/functions/activate", {"name": "approval"}, "name"),
            ("/v1/sessions/s-none", {"functions": ["approval"]}, "functions"),
        ):
            answer = bare.post(path, json=body) if "activate" in path else bare.put(path, json=body)
            error = answer.json()["error"]
            assert (answer.status_code, error["code"], error["field"]) == (422, "unknown_function", field)
            assert "no definitions are loaded: set AGENT_SIGNAL_FUNCTIONS_DIR" in error["message"], error


def test_a_refused_put_activates_and_locks_nothing(
    make_settings: Any, redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PUT refused for its user's sessions (429) or for contention (503) had already activated and locked its
    ``functions``; the settings and the functions' state are now one transaction, so a refusal changes neither."""
    from sessions import store as store_module
    from sessions.function_store import FunctionStore
    from sessions.store import SettingsChange

    settings = make_settings(functions_dir=str(FUNCTIONS), max_sessions_per_user=1)
    with TestClient(create_web_app(settings)) as c:
        assert c.put("/v1/sessions/s-a", json={"userId": "ux"}).status_code == 200
        body = {"userId": "ux", "functions": ["approval"], "dmailEnabled": True}
        refused = c.put("/v1/sessions/s-b", json=body)
        assert refused.status_code == 429 and refused.json()["error"]["field"] == "userId", refused.text
        assert redis_client.exists(keys.functions_state(session_scope("s-b"))) == 0
        assert redis_client.exists(keys.session(session_scope("s-b"))) == 0

        assert c.put("/v1/sessions/s-c", json={"root": True}).status_code == 200
        real_update, real_watch = FunctionStore.update, SettingsChange.watch

        def few_tries(self: FunctionStore, *args: Any, **kwargs: Any) -> Any:
            self.max_retries = 3
            return real_update(self, *args, **kwargs)

        def touched(self: SettingsChange, pipe: Any) -> None:
            real_watch(self, pipe)
            self.store.client.expire(self.settings_key, 600)  # another write, inside every try

        monkeypatch.setattr(store_module, "SETTINGS_RETRIES", 3)
        monkeypatch.setattr(FunctionStore, "update", few_tries)
        monkeypatch.setattr(SettingsChange, "watch", touched)
        busy = c.put("/v1/sessions/s-c", json={"functions": ["approval"], "dmailEnabled": True})
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "busy", busy.text
        assert redis_client.exists(keys.functions_state(session_scope("s-c"))) == 0
        monkeypatch.undo()
        assert c.get("/v1/sessions/s-c").json()["dmailEnabled"] is False


def test_sending_the_same_functions_again_keeps_their_activation_turn(
    make_settings: Any, tmp_path: Any
) -> None:
    """Re-sending a session's ``functions`` (with another setting changed) re-activated each function, so
    ``turn_count(2)`` restarted and never finished while a client kept sending its settings. A function already
    active is now only locked: one activated with POST is locked by the PUT without a restart too."""
    (tmp_path / "t.md").write_text(
        "---\nname: timed\ndescription: finishes after two turns\ncontinue_until: turn_count(2)\n---\n"
    )
    with TestClient(create_web_app(make_settings(functions_dir=str(tmp_path)))) as c:
        assert c.put("/v1/sessions/s-t1", json={"functions": ["timed"]}).status_code == 200
        assert c.post("/v1/sessions/s-t2/functions/activate", json={"name": "timed"}).status_code == 200
        for session in ("s-t1", "s-t2"):
            for _ in range(2):
                assert c.post(f"/v1/sessions/{session}/turn", json={"userMessaged": False}).status_code == 200
            again = c.put(f"/v1/sessions/{session}", json={"dmailEnabled": True, "functions": ["timed"]})
            assert again.json()["functions"] == ["timed"], again.text
            decision = c.post(f"/v1/sessions/{session}/idle", json={}).json()
            assert decision["completed"] == ["timed"], (session, decision)


def test_sending_functions_again_after_their_definition_changed_makes_their_state_anew(
    make_settings: Any, tmp_path: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """Re-sent ``functions`` only locked a function already active, so a state kept from a definition whose
    ``state_schema_version`` has changed since was never made anew (activate was the only place that did): a
    re-send now activates such a function again, its state that of the new version (turns counted from 0)."""
    definition = tmp_path / "t.md"

    def define(version: int) -> None:
        definition.write_text(
            "---\nname: timed\ndescription: finishes after two turns\ncontinue_until: turn_count(2)\n"
            f"state_schema_version: {version}\n---\n"
        )

    def state() -> dict[str, Any]:
        stored = json.loads(redis_client.get(keys.functions_state(session_scope("s-v"))) or "{}")
        return dict(stored["states"]["timed"])

    define(1)
    with TestClient(create_web_app(make_settings(functions_dir=str(tmp_path)))) as c:
        assert c.put("/v1/sessions/s-v", json={"functions": ["timed"]}).status_code == 200
        assert c.post("/v1/sessions/s-v/turn", json={"userMessaged": False}).status_code == 200
    assert (state()["schemaVersion"], state()["currentTurn"]) == (1, 1)
    define(2)  # a new release of the definitions: a new app reads them
    with TestClient(create_web_app(make_settings(functions_dir=str(tmp_path)))) as c:
        again = c.put("/v1/sessions/s-v", json={"dmailEnabled": True, "functions": ["timed"]})
        assert again.json()["functions"] == ["timed"], again.text
    assert (state()["schemaVersion"], state()["currentTurn"]) == (2, 0)


def test_deactivating_a_locked_function_is_refused_naming_it(
    client: TestClient, redis_client: Redis, keys: BucketKeys
) -> None:
    """A deactivate of a function the settings lock left the settings saying it is kept active (and it stayed
    locked): now a 409 ``function_locked`` naming ``name``, nothing changed; once a PUT drops it, it ends."""
    assert client.put("/v1/sessions/s-l", json={"functions": ["approval"]}).status_code == 200
    state_key = keys.functions_state(session_scope("s-l"))
    before = redis_client.get(state_key)
    refused = client.post("/v1/sessions/s-l/functions/deactivate", json={"name": "approval"})
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("function_locked", "name")
    assert "'approval'" in error["message"] and "remove it from functions with PUT first" in error["message"]
    assert redis_client.get(state_key) == before
    assert client.put("/v1/sessions/s-l", json={"functions": []}).json()["functions"] == []
    ended = client.post("/v1/sessions/s-l/functions/deactivate", json={"name": "approval"})
    assert ended.status_code == 200 and ended.json()["active"] == [], ended.text
