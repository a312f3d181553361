"""Engines and models installed once into the project's cache, the way a container image is pulled.

Each piece is keyed by everything that decides what gets built (versions, build flags, the CPU
features a build depends on), so a cache built by another machine or another configuration is never
reused by mistake.
"""
