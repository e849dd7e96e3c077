"""Kubernetes' service-link variables, told apart from settings.

With ``enableServiceLinks`` (on by default) kubelet sets, in every pod, variables for each Service of the
namespace that has a cluster IP: a Service named ``agent-signal-web`` gives ``AGENT_SIGNAL_WEB_SERVICE_HOST``,
``AGENT_SIGNAL_WEB_PORT=tcp://10.0.0.1:8000`` and more, which read as misspelt settings. The shipped manifests
turn the links off; :func:`is_service_link` lets a pod deployed otherwise start too, without hiding a typo.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

__all__ = ["is_service_link"]

# Kubernetes' service-link variables (enableServiceLinks, on by default): for each Service with a cluster IP,
# kubelet sets <SVC>_SERVICE_HOST (the IP), <SVC>_SERVICE_PORT and <SVC>_SERVICE_PORT_<PORT NAME> (numbers) and
# Docker-links-style <SVC>_PORT and <SVC>_PORT_<n>_<PROTO> (proto://ip:n), ..._PROTO, ..._PORT and ..._ADDR, SVC
# being the Service's name upper-cased with dashes as underscores: agent-signal-web → AGENT_SIGNAL_WEB_*.
_LINK_PROTO = "(?P<proto>TCP|UDP|SCTP)"
_SERVICE_LINK_FORMS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), value)
    for pattern, value in (
        (r"(?P<svc>[A-Z0-9_]+)_SERVICE_HOST", "ip"),
        (r"(?P<svc>[A-Z0-9_]+)_SERVICE_PORT(?:_[A-Z0-9_]+)?", "number"),
        (r"(?P<svc>[A-Z0-9_]+)_PORT", "url"),
        (rf"(?P<svc>[A-Z0-9_]+)_PORT_(?P<n>[0-9]+)_{_LINK_PROTO}", "url"),
        (rf"(?P<svc>[A-Z0-9_]+)_PORT_(?P<n>[0-9]+)_{_LINK_PROTO}_PROTO", "proto"),
        (rf"(?P<svc>[A-Z0-9_]+)_PORT_(?P<n>[0-9]+)_{_LINK_PROTO}_PORT", "n"),
        (rf"(?P<svc>[A-Z0-9_]+)_PORT_(?P<n>[0-9]+)_{_LINK_PROTO}_ADDR", "ip"),
    )
)


def _is_ip(value: str | None) -> bool:
    try:
        ipaddress.ip_address(value or "")
    except ValueError:
        return False
    return True


def _is_port_url(value: str, proto: str | None, port: str | None) -> bool:
    """``tcp://10.0.0.1:8000`` (``tcp://[fd00::1]:8000``): a service link's ``proto://ip:port``."""
    scheme, sep, rest = value.partition("://")
    host, _, number = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return (
        bool(sep)
        and scheme in ("tcp", "udp", "sctp")
        and (proto is None or scheme == proto.lower())
        and number.isdigit()
        and (port is None or number == port)
        and _is_ip(host)
    )


def is_service_link(name: str, env: Mapping[str, str]) -> bool:
    """Whether ``name`` is a variable kubelet set for a Service: only inside Kubernetes, in one of the
    service-link forms, with a service link's value, and its Service's ``_SERVICE_HOST`` (an IP) and
    ``_SERVICE_PORT`` (a number) set too. A misspelt setting fails one of these and is still refused."""
    if not env.get("KUBERNETES_SERVICE_HOST"):
        return False
    value = env[name]
    for pattern, shape in _SERVICE_LINK_FORMS:
        match = pattern.fullmatch(name)
        if match is None:
            continue
        groups = match.groupdict()
        svc, proto, port = groups["svc"], groups.get("proto"), groups.get("n")
        shaped = {
            "ip": _is_ip(value),
            "number": value.isdigit(),
            "url": _is_port_url(value, proto, port),
            "proto": proto is not None and value == proto.lower(),
            "n": value == port,
        }[shape]
        if shaped and _is_ip(env.get(f"{svc}_SERVICE_HOST")) and env.get(f"{svc}_SERVICE_PORT", "").isdigit():
            return True
    return False
