"""Agent-facing tools that answer synchronously: the per-session context store and D-Mail (kimi-cli), and
(later) the rolebox ``signal`` tool. An agent waits for these answers, so they do not go through the queue:
each mutation is **one atomic Redis script** over the session's keys (hash-tagged by the session's scope
``session:<id>``), which serializes it with every other mutation of that session, from any process. Each call
is also recorded as a source event on the session's scope, so it appears in chains, metrics and receipts.
"""
