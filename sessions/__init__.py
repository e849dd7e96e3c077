"""Agent-facing tools that answer synchronously: the per-session context store and D-Mail (kimi-cli), and the
rolebox ``signal`` tool and function state machine (signals.py, functions.py). An agent waits for these answers,
so they do not go through the queue: each mutation is **one atomic Redis script** over the session's keys (in the
tenant's slot: the tenant is the hash tag, docs/keys.md), which serializes it with every other mutation of that
session, from any process. Each call
is also recorded as a source event on the session's scope, so it appears in chains, metrics and receipts.
"""
