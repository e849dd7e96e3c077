"""The reconcile sweep (worker/runtime/reconcile.py): what it takes for stranded, and what it leaves alone."""
