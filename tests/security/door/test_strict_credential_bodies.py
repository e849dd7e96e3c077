"""Every body the door takes is decoded by its one strict decoder (producers/http/strict_json.py), and a number
too long to read is named as such.

Before: ``POST /v1/keys`` and ``POST /v1/tokens`` let FastAPI parse their body parameter, so a body nested 5,000
levels deep was ``400 http_400 "There was an error parsing the body"`` (and a ``NaN`` was taken), where every
other route answers ``422 invalid_json`` (contract: JSON nested too deep → 422 invalid_json). Now their router's
route class hands FastAPI the door's decoder (producers/http/web_common.py ``StrictJsonRoute``), and their models
stay in the OpenAPI document by reference (the TypeScript client's types name them). And a 5,000-digit integer
was a 422 with no field whose message told the caller to call ``sys.set_int_max_str_digits()``; now it is a 422
``invalid_json`` naming the field and saying the number is too long.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers.http.strict_json import MAX_JSON_DEPTH, InvalidBody, decode_json
from tests.security.conftest import ClientFactory

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-strict-credential-bodies-0123456789"
DEEP = b"[" * 5_000 + b"]" * 5_000
TOO_LONG = "9" * 5_000  # sys.get_int_max_str_digits() is 4,300
JSON = {"content-type": "application/json"}


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}", **JSON}


def _error(response: Any) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def _operate_key(client: TestClient) -> str:
    made = client.post("/v1/keys", json={"tenant": "acme", "role": "operate"}, headers=_bearer(BOOT))
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


class TestCredentialBodies:
    def test_a_body_nested_too_deep_is_422_invalid_json(self, app_client: ClientFactory) -> None:
        """A body nested 5,000 levels deep to /v1/keys or /v1/tokens is 422 invalid_json, as on /v1/events."""
        client = app_client(bootstrap_key=BOOT)
        operate = _operate_key(client)
        for path, bearer in (("/v1/keys", BOOT), ("/v1/tokens", operate)):
            for body in (DEEP, b'{"role":' * 100 + b"1" + b"}" * 100):
                assert _error(client.post(path, content=body, headers=_bearer(bearer))) == {
                    "code": "invalid_json",
                    "message": f"request body is nested deeper than {MAX_JSON_DEPTH} levels",
                    "field": None,
                }, path

    def test_not_strict_json_is_422_naming_the_field_and_other_errors_are_unchanged(
        self, app_client: ClientFactory
    ) -> None:
        """NaN and a too-long number are refused naming their field; a body that is no object, an unknown field
        and a valid body are answered as before."""
        client = app_client(bootstrap_key=BOOT)
        operate = _operate_key(client)
        nan = _error(client.post("/v1/keys", content=b'{"role":"read","name":NaN}', headers=_bearer(BOOT)))
        assert (nan["code"], nan["field"]) == ("invalid_json", "name")
        long_ttl = f'{{"userId":"u1","ttlS":{TOO_LONG}}}'.encode()
        too_long = _error(client.post("/v1/tokens", content=long_ttl, headers=_bearer(operate)))
        assert (too_long["code"], too_long["field"]) == ("invalid_json", "ttlS")
        assert "too long" in too_long["message"] and "sys." not in too_long["message"]
        for body in (b"[]", b"5"):
            assert _error(client.post("/v1/keys", content=body, headers=_bearer(BOOT))) == {
                "code": "invalid_json",
                "message": "request body must be a JSON object",
                "field": None,
            }
        unknown = client.post("/v1/tokens", json={"userId": "u1", "extra": 1}, headers=_bearer(operate))
        assert _error(unknown)["field"] == "extra"
        minted = client.post("/v1/tokens", json={"userId": "u1", "ttlS": 60}, headers=_bearer(operate))
        assert minted.status_code == 200 and minted.json()["token"]

    def test_their_models_stay_in_the_openapi_document_by_reference(self, app_client: ClientFactory) -> None:
        """The request bodies of POST /v1/keys and POST /v1/tokens still name KeyRequest and TokenRequest."""
        client = app_client(ops_open="always")
        document = client.get("/openapi.json").json()
        for path, model in (("/v1/keys", "KeyRequest"), ("/v1/tokens", "TokenRequest")):
            body = document["paths"][path]["post"]["requestBody"]
            assert body["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{model}"}
            assert body["required"] is True and model in document["components"]["schemas"]


class TestTooLongNumbers:
    def test_an_event_with_a_number_too_long_is_422_naming_the_field(self, app_client: ClientFactory) -> None:
        """A 5,000-digit integer in an event is 422 invalid_json naming its field, with no Python internals."""
        client = app_client()
        head = '{"sourceType":"agent.user.message","sourceId":"m1","payload":{"topicId":"t","n":'
        event = head + TOO_LONG + "}}"
        error = _error(client.post("/v1/events", content=event.encode(), headers=JSON))
        assert (error["code"], error["field"]) == ("invalid_json", "payload.n")
        assert error["message"] == "payload.n is a number too long: integers may have at most 4300 digits"
        batch = f'{{"events":[{event},{event.replace(TOO_LONG, "-" + TOO_LONG)}]}}'.encode()
        answer = client.post("/v1/events", content=batch, headers=JSON)
        assert _error(answer)["field"] == "events[0].payload.n"

    def test_the_decoder_names_where_the_number_is(self) -> None:
        """The first too-long integer is named by its path; the body itself when it is one; the limit holds."""
        for raw, field in (
            (f'{{"a":[1,{{"b":-{TOO_LONG}}}]}}', "a.1.b"),
            (f'{{"events":[{{}},{{"payload":{{"x":{TOO_LONG}}}}}]}}', "events[1].payload.x"),
            (TOO_LONG, None),
        ):
            with pytest.raises(InvalidBody) as caught:
                decode_json(raw.encode(), require_object=False)
            error = caught.value.error
            assert (error.code, error.field) == ("invalid_json", field)
            assert "too long" in error.message and "int_max_str_digits" not in error.message
        assert decode_json(b'{"n":' + b"9" * 4300 + b"}") == {"n": int("9" * 4300)}
