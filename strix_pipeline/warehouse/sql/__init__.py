"""The warehouse schema as SQL files: data, read through importlib.resources (schema.py)."""
