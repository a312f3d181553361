"""Helpers the tests share: fake and real services, seeded data, configs. No tests here.

Imported as ``support.<module>`` (tests/ is on sys.path through tests/conftest.py); processes that load a
helper by file, as Dagster's code servers do, import it as ``tests.support.<module>``.
"""
