"""worker/telemetry: log privacy, per-process metrics, pseudonyms, per-event telemetry plans."""
