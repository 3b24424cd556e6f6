"""Persistence: schema (tables), engine and migrations (db), row access (rows), and every
statement the server runs, each in a function named for what it reads or writes (one module
per purpose: docs/architecture.md, "Where each concern lives")."""

from .db import create_engine_for, current_revision, migrate

__all__ = ["create_engine_for", "current_revision", "migrate"]
