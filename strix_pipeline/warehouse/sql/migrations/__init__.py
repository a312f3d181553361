"""Numbered schema migrations as SQL files: data, applied in order by warehouse/schema.py."""
