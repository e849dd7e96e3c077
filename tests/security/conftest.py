"""Fixtures the security tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers.http.app import create_web_app
from tests.conftest import SettingsFactory

ClientFactory = Callable[..., TestClient]


@pytest.fixture
def app_client(make_settings: SettingsFactory) -> Iterator[ClientFactory]:
    """Factory: a started TestClient of ``create_web_app(make_settings(**overrides))``."""
    clients: list[TestClient] = []

    def start(**overrides: Any) -> TestClient:
        client = TestClient(create_web_app(make_settings(**overrides)))
        clients.append(client)
        return client.__enter__()

    yield start
    for client in clients:
        client.__exit__(None, None, None)
