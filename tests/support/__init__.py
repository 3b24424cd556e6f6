"""Shared test helpers: a real `orbit-server` process and a worker-protocol test client."""
