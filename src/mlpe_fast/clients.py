"""The client a run's configuration asks for: one :class:`~.engine.Client`,
or :class:`~.engine.replicas.Replicas` over several ``--endpoints``.

Used by the point runner and by every engine process alike, so that both
build their clients from the same settings (and neither imports the
other).
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import RunConfig
from .engine import Client, ClientConfigError
from .engine.replicas import AnyClient, Replicas
from .engine.rx_sched import AUTO_PRIORITY
from .errors import UsageError

__all__ = ("client_for",)


def client_for(
    config: RunConfig, endpoints: str | Sequence[str], *, turn_timeout_s: float | None = None
) -> AnyClient:
    """The client for ``endpoints`` (one URL, or several replicas), not yet
    open, with the configuration's headers, timeouts, limits and TLS settings.

    ``turn_timeout_s`` (agentic runs) caps the total timeout: a turn that
    takes longer fails (``TotalTimeout``) and ends its trajectory.
    ``max_connections`` applies to each endpoint.

    Raises:
        UsageError: an endpoint URL or a client setting is not usable.
    """
    urls = (endpoints,) if isinstance(endpoints, str) else tuple(endpoints)
    if not urls:
        raise UsageError("no endpoint to measure: pass --endpoints URL")
    total_s = config.timeouts.total_s
    if turn_timeout_s is not None:
        total_s = min(turn_timeout_s, total_s or turn_timeout_s)
    try:
        clients = [
            Client(
                url,
                api_key=config.api_key,
                headers=dict(config.headers),
                connect_timeout=config.timeouts.connect_s,
                idle_timeout=config.timeouts.idle_s,
                total_timeout=total_s,
                max_connections=config.max_connections,
                http2=config.http2,
                ca_bundle=config.ca_bundle,
                insecure=config.insecure,
                receive_priority=(
                    AUTO_PRIORITY if config.receive_priority is None else config.receive_priority
                ),
                receive_cpus=config.receive_cpus,
                kernel_stamps=config.receive_stamps in ("kernel", "packet"),
                packet_stamps=config.receive_stamps == "packet",
                # SGLang's /generate streams the whole text so far (R11)
                dialect="sglang" if config.api_type == "sglang" else "openai",
            )
            for url in urls
        ]
    except ClientConfigError as error:
        raise UsageError(str(error)) from None
    return clients[0] if len(clients) == 1 else Replicas(clients)
