"""Shared pytest setup: fixture modules live in their own files and are registered here."""

# Names are top-level modules: tests/ has no __init__.py, so pytest puts tests/ on sys.path
# before importing this conftest (import mode "prepend").
pytest_plugins = ["kafka_fixtures", "core_fixtures", "streaming_fixtures"]
