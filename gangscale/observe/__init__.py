"""Metrics, health and debug HTTP server, structured logging."""
