"""Self-iteration (LobeHub's analyzeIntent, completion and review policies): feedback becomes memory and skill
writes through agent runs, and completed runs become receipts. Judges are rule-based by default
(``judges/rules.py``) with an OpenAI-compatible adapter; agent runs go through the ``AgentRunner`` port
(``agent/runners.py``). Rooms: ``handlers/`` (the policies' handlers), ``judges/``, ``agent/`` (runners and the
reference agent), ``records/`` (skill documents and receipts); the plugin, its settings and dependencies, keys,
gate, payload schemas and erasure sit at the top."""
