"""The receipt streams (``GET /v1/receipts/stream``): one Redis subscriber per web process, each stream's SSE response, and a tenant's stream slots across processes."""
