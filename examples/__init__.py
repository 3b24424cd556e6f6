"""Runnable examples (``python -m examples.worker`` from the repository root)."""
