"""Integration tests: PostgreSQL, the real Redis broker and real Dramatiq worker processes."""
