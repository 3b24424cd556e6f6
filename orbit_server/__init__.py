"""Orbit."""
