"""The operator's verbs: API keys (``keys``), data migrations after an upgrade (``migrate``), the pseudonyms logs
use (``pseudonym``), and what a pod's probes and shutdown run (``probe``: ``probe worker|web``, ``drain``)."""
