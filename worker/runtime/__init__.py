"""The Celery process: the app factory, tasks, fair share, reconcile, plugins' assembly, the embedded Redis."""
