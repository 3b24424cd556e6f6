"""Runnable example: a long job resumed from its checkpoint (``python -m examples.long_job``)."""
