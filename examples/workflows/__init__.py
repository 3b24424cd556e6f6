"""The workflow example: a chord of word counts and their merge (one workflow)."""
