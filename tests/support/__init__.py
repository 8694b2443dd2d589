"""Shared test helpers (DEBT 7 asks for one place; new helpers start here)."""
