"""producers/http/access_log.py: an access line names the route, never the path as sent, and a user token's
user only as the field the log's privacy processor turns into a pseudonym."""

from __future__ import annotations

from producers.http.access.principal import Principal
from producers.http.access_log import NO_ROUTE, access_fields, flat_routes, route_template
from producers.http.app import create_web_app
from worker.settings import Settings


def test_a_request_refused_before_routing_is_logged_under_its_route_template() -> None:
    """A path that names a user, a scope or a chain is logged as its route's template (a 401 has no route in
    its scope: the routes are matched for it); a path no route matches is ``(no route)``."""
    routes = flat_routes(create_web_app(Settings(redis_url="redis://unused")).router.routes)
    assert route_template({"path": "/v1/users/alice"}, routes) == "/v1/users/{user_id}"
    assert route_template({"path": "/v1/scopes/user:alice/x/pause"}, routes) == "/v1/scopes/{scope_key}/pause"
    assert route_template({"path": "/v1/nothing/alice"}, routes) == NO_ROUTE


def test_a_user_tokens_line_names_the_minting_key_and_the_user_apart() -> None:
    """``credential`` is the key that minted the token (its id is ``<issuer>:<userId>``); ``userId`` is separate."""
    principal = Principal("acme", "user", "key_1:alice", "alice")
    scope = {"method": "GET", "path": "/v1/memories", "state": {"principal": principal}}
    fields = access_fields(scope, 200, 1.0)
    assert fields["credential"] == "key_1" and fields["userId"] == "alice" and fields["path"] == NO_ROUTE
    assert "alice" not in str({k: v for k, v in fields.items() if k != "userId"})
