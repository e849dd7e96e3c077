"""The door: HTTP bodies and ingress, the receipts stream, the OpenAPI document, shipped source schemas, the
CLI."""
