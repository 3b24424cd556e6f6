"""Alembic environment and revisions of the Orbit schema."""
