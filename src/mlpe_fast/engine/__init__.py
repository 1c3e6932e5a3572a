"""The engine: connections, timestamps taken at the read, one record per request."""

from .client import Client, ClientConfigError, EndpointUnreachable
from .record import RequestRecord

__all__ = ("Client", "ClientConfigError", "EndpointUnreachable", "RequestRecord")
