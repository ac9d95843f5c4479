"""Spaces, tasks and the notification outbox in SQL, for SQLite and PostgreSQL alike."""
