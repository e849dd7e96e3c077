"""The Celery process: the app factory, tasks, fair share, reconcile, plugins' assembly, the embedded Redis and the
stack file by which a second terminal joins a `make run` stack."""
