"""What operators and the door read and change: scopes, runs, erasure, credentials, rate limits, workers, gauges."""
