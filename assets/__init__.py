"""Dagster assets and asset checks: thin definitions that call into strix_pipeline."""
