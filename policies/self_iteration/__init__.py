"""Self-iteration (LobeHub's analyzeIntent, completion and review policies): feedback becomes memory and skill
writes through agent runs, and completed runs become receipts. Judges are rule-based by default
(``judges.py``) with an OpenAI-compatible adapter; agent runs go through the ``AgentRunner`` port
(``runners.py``)."""
