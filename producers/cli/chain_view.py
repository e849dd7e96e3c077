"""Rendering a stored chain (``{"envelope", "record"}``) for people: the five steps, edges, dominant path. A
document that does not read as a chain (a part missing or of another kind) is :class:`NotAChain`, never a
KeyError: over HTTP it came from whatever answered (producers/cli/inspection.py words it as not the API's)."""

from __future__ import annotations

from typing import Any

__all__ = ["NotAChain", "render_chain"]


class NotAChain(ValueError):
    """The document is no stored chain; the message says what it lacks (``without 'signals'``)."""


def render_chain(chain: dict[str, Any]) -> str:
    """The chain in five steps; :class:`NotAChain` when it does not read as one."""
    try:
        return _render(chain)
    except KeyError as exc:
        raise NotAChain(f"without {exc}") from None
    except (TypeError, AttributeError) as exc:  # a part of another kind: a string where an object belongs
        raise NotAChain(f"of another shape ({type(exc).__name__}: {str(exc)[:100]})") from None


def _render(chain: dict[str, Any]) -> str:
    envelope, record = chain["envelope"], chain["record"]
    src = envelope["source"]
    meta = envelope.get("metadata", {})
    out = [
        f"chain {envelope['chainId']}  status={meta.get('status')}  attempt={meta.get('attempt')}  "
        f"final={record.get('finalStatus', 'none')}  duration={record.get('durationMs')}ms",
        "",
        "1. source",
        f"   {src['sourceType']}  id={src['sourceId']}  scope={src['scopeKey']}  event={src.get('eventId')}",
        "",
        f"2. signals ({len(envelope['signals'])})",
    ]
    out += [f"   {s['signalType']}  id={s['signalId']}" for s in envelope["signals"]] or ["   (none)"]
    out += ["", f"3. actions ({len(envelope['actions'])})"]
    out += [f"   {a['actionType']}  id={a['actionId']}" for a in envelope["actions"]] or ["   (none)"]
    out += ["", f"4. results ({len(envelope['results'])})"]
    out += [
        f"   {r['status']:<8} {r['actionId']}  {r.get('detail') or ''}".rstrip() for r in envelope["results"]
    ] or ["   (none)"]
    out += ["", "5. edges"]
    out += [f"   {e['from']} --{e['relation']}--> {e['to']}" for e in envelope["edges"]] or ["   (none)"]
    conclusion = record["conclusionChain"]
    out += ["", "   dominant path: " + " -> ".join(conclusion["dominantPath"])]
    if conclusion.get("finalReason"):
        out.append(f"   final reason: {conclusion['finalReason']}")
    if meta.get("terminal"):
        out.append(f"   terminal: {meta['terminal']}")
    if meta.get("error"):
        out.append(f"   error: {meta['error']}")
    return "\n".join(out)
