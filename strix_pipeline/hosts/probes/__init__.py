"""Measurements of the host itself beside a run: its CPU speed, its noise, its copy bandwidth."""
