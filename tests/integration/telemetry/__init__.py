"""Telemetry on real processes: instruments, spans and traces, and metrics summed across replicas."""
