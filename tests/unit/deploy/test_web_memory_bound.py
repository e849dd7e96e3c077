"""deploy/k8s: the web container's memory limit holds what request bodies can take there.

A deploy audit: at the defaults (8 MiB bodies, 32 pending bodies per credential) 12 concurrent posts of one
credential peaked at 577 MB in a container limited to 512Mi. A process now holds at most
``AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT`` bytes of bodies, from a body's first byte until its answer. The figures
below are measured (web.yaml's comment and docs/operations.md, "Web memory per request body"); the test reads the
rendered web Deployment, so a change to the budget or the limit that breaks the bound fails here.
"""

from __future__ import annotations

import re

from producers.http.settings import DoorSettings
from tests.unit.deploy.conftest import Obj, containers, env_of, find

MIB = 1024 * 1024
# A parsed body's peak, in multiples of its bytes: many small JSON objects measured 26-34x (long strings 6-10x).
EXPANSION = 32
IDLE_MIB = 96  # an idle web process's RSS (measured about 91 MiB)
UNITS = {"Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB, "k": 1000, "M": 1000**2, "G": 1000**3, "": 1}


def _bytes(quantity: str) -> int:
    """A Kubernetes memory quantity (``512Mi``, ``1Gi``, ``600M``, ``536870912``) in bytes."""
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|k|M|G|)", quantity)
    assert match, f"unsupported quantity {quantity!r}"
    return int(match[1]) * UNITS[match[2]]


def _setting(web: Obj, env_name: str, field: str) -> int:
    """The container's value of ``env_name``, else the setting's default."""
    entry = env_of(web).get(env_name)
    if entry is None:
        return int(DoorSettings.model_fields[field].default)
    return int(entry["value"])


def test_the_bodies_a_web_process_holds_fit_its_memory_limit(objects: list[Obj]) -> None:
    """idle + the in-flight budget x 32 stays under the web container's limit, and a body of the largest size
    fits one credential's half of the budget."""
    (web,) = [c for c in containers(find(objects, "Deployment", "agent-signal-web")) if c["name"] == "web"]
    body_bytes = _setting(web, "AGENT_SIGNAL_MAX_REQUEST_BYTES", "max_request_bytes")
    entry = env_of(web).get("AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT")
    assert entry is not None, (
        "web.yaml sets AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT: the memory limit is sized by it"
    )
    budget = int(entry["value"])
    assert budget > 0, "AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT=0 leaves the web container's memory unbounded"
    assert budget >= 2 * body_bytes, "a body of AGENT_SIGNAL_MAX_REQUEST_BYTES must fit half the budget"
    limit = _bytes(web["resources"]["limits"]["memory"])
    worst = IDLE_MIB * MIB + budget * EXPANSION
    assert worst <= limit, (
        f"{budget} bytes x {EXPANSION} + {IDLE_MIB} MiB = {worst / MIB:.0f} MiB > the {limit / MIB:.0f} MiB "
        "limit: lower AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT in web.yaml, or raise its memory limit"
    )
    assert web["resources"]["requests"]["memory"] and _bytes(web["resources"]["requests"]["memory"]) <= limit
