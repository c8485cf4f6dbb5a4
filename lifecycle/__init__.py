"""Retention: delete-on-consume, per-version prefix collection and bucket lifecycle
rules. Installed as ``objstore_payload.lifecycle``; depends on the core only."""
