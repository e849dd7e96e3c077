"""Spans, metrics and logs: the OpenTelemetry recorder, Prometheus exposition, log configuration and its privacy."""
