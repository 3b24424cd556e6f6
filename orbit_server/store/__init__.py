"""Persistence: schema (tables), engine and migrations (db), row access (rows)."""

from .db import create_engine_for, current_revision, migrate

__all__ = ["create_engine_for", "current_revision", "migrate"]
