"""Rendering a stored chain for people: the five steps, then edges and the dominant path."""

from __future__ import annotations

from typing import Any

__all__ = ["chain_edges", "dominant_path", "render_chain"]


def chain_edges(chain: dict[str, Any]) -> list[dict[str, str]]:
    """``triggered`` (source→signal), ``produced`` (signal→signal/action), ``resulted-in`` (action→result)."""
    edges: list[dict[str, str]] = []
    source_id = chain["source"]["sourceId"]
    for signal in chain.get("signals", []):
        parent = signal.get("chain", {}).get("parentNodeId") or source_id
        relation = (
            "resulted-in"
            if signal.get("chain", {}).get("parentActionId")
            else ("triggered" if parent == source_id else "produced")
        )
        edges.append({"from": parent, "relation": relation, "to": signal["signalId"]})
    for action in chain.get("actions", []):
        edges.append({"from": action["signal"]["signalId"], "relation": "produced", "to": action["actionId"]})
    return edges


def dominant_path(chain: dict[str, Any]) -> list[str]:
    """The source type, then every signal type in order, then the last action's type (LobeHub §6.3)."""
    path = [chain["source"]["sourceType"]]
    path.extend(s["signalType"] for s in chain.get("signals", []))
    actions = chain.get("actions", [])
    if actions:
        path.append(actions[-1]["actionType"])
    return path


def render_chain(chain: dict[str, Any]) -> str:
    src = chain["source"]
    out = [
        f"chain {chain.get('chainId')}  status={chain.get('status')}  attempt={chain.get('attempt')}  "
        f"duration={chain.get('durationMs')}ms",
        "",
        "1. source",
        f"   {src['sourceType']}  id={src['sourceId']}  scope={src['scopeKey']}  event={src.get('eventId')}",
        "",
        f"2. signals ({len(chain.get('signals', []))})",
    ]
    out += [f"   {s['signalType']}  id={s['signalId']}" for s in chain.get("signals", [])] or ["   (none)"]
    out += ["", f"3. actions ({len(chain.get('actions', []))})"]
    out += [f"   {a['actionType']}  id={a['actionId']}" for a in chain.get("actions", [])] or ["   (none)"]
    out += ["", f"4. results ({len(chain.get('results', []))})"]
    out += [
        f"   {r['status']:<8} {r['actionId']}  {r.get('detail') or ''}".rstrip()
        for r in chain.get("results", [])
    ] or ["   (none)"]
    out += ["", "5. edges"]
    out += [f"   {e['from']} --{e['relation']}--> {e['to']}" for e in chain_edges(chain)] or ["   (none)"]
    out += ["", "   dominant path: " + " -> ".join(dominant_path(chain))]
    if chain.get("terminal"):
        out.append(f"   terminal: {chain['terminal']}")
    if chain.get("error"):
        out.append(f"   error: {chain['error']}")
    return "\n".join(out)
