"""Draining one scope: the lease, each head event through its steps, the fenced commit."""
