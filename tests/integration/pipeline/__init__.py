"""The pipeline end to end on real workers: invariants, commits of one and of many, fenced writes, redrive
order, many tenants in one process, stored chains, the short chaos scenarios."""
