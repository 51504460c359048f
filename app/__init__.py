"""The operator studio (Flask + htmx). It reads the engine's tables and changes state only
through the engine's public API."""
