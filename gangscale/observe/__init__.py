"""Metrics, health and debug HTTP server, structured logging."""

from gangscale.observe.logs import configure_logging
from gangscale.observe.metrics import Metrics
from gangscale.observe.server import ObserveServer

__all__ = ["Metrics", "ObserveServer", "configure_logging"]
