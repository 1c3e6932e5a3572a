"""Several endpoints serving one model: one :class:`Client` each, one load.

    async with Replicas([Client(url_a), Client(url_b)]) as replicas:
        replicas.issue(body, on_done)      # goes to a or b

``mlpe-fast run --endpoints URL_A URL_B`` measures the system the replicas
make together (spec §2.4: one endpoint configuration per curve; a system
may be several servers without a balancer in front).  Each request goes to
the replica with the fewest requests in flight, ties broken in turn: at a
fixed concurrency C that keeps C / N in flight at each of N equal
replicas, and a slower replica is not handed more than its share of the
users (dealing strictly in turn would let it collect in-flight requests);
under Poisson arrivals it deals in turn while they keep up.  A request
that carries headers of its own (an agentic turn's ``X-Session-ID``) goes
where the first request with the same headers went: a conversation's turns
stay on one replica, whose prefix cache holds their history.

Every record says which replica served it (``RequestRecord.endpoint``, the
index in the order given), so per-endpoint counts are a function of the
records (:func:`endpoint_shares`) and survive the trip from engine
processes.  With one endpoint the run uses its :class:`Client` directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from .client import CHAT_PATH, Client, EndpointUnreachable, awaited_record
from .exchange import Exchange
from .record import RequestRecord
from .record_columns import as_columns

__all__ = ("AnyClient", "Replicas", "endpoint_shares")


class Replicas:
    """The :class:`Client` interface a scheduler uses, over several clients
    (module doc).  ``members`` keeps the given order: a record's
    ``endpoint`` is an index into it."""

    def __init__(self, members: Sequence[Client]) -> None:
        if len(members) < 2:
            raise ValueError("Replicas needs at least two clients")
        self.members = tuple(members)
        self._next = 0
        self._on_done = [self._tagging(i) for i in range(len(members))]
        self._affinity: dict[tuple[tuple[str, str], ...], int] = {}  # headers -> replica

    # -- lifecycle ------------------------------------------------------------

    async def __aenter__(self) -> Replicas:
        self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def open(self) -> None:
        for client in self.members:
            client.open()

    async def aclose(self) -> None:
        for client in self.members:
            await client.aclose()

    async def check_reachable(self) -> None:
        """Each endpoint in turn (:meth:`Client.check_reachable`).

        Raises:
            EndpointUnreachable: the first that cannot be reached, named in
                the message.
        """
        for client in self.members:
            try:
                await client.check_reachable()
            except EndpointUnreachable as error:
                raise EndpointUnreachable(
                    error.error_class, f"{client.base_url}: {error}"
                ) from None

    async def warm_up(self, count: int, *, concurrency: int = 128) -> int:
        """``count`` connections spread over the endpoints (:meth:`Client.warm_up`)."""
        n = len(self.members)
        shares = [count // n + (1 if i < count % n else 0) for i in range(n)]
        # at once, so that the endpoints' setups overlap rather than add up
        ready = await asyncio.gather(
            *(
                client.warm_up(share, concurrency=concurrency)
                for client, share in zip(self.members, shares, strict=True)
            )
        )
        return sum(ready)

    async def cancel_in_flight(
        self, message: str = "the run was interrupted with the request in flight"
    ) -> None:
        for client in self.members:
            await client.cancel_in_flight(message)

    # -- requests -------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return sum(client.in_flight for client in self.members)

    def new_sample_id(self) -> str:
        return self.members[0].new_sample_id()

    def _pick(self) -> int:
        """The replica with the fewest requests in flight, the next in turn
        among equals."""
        members = self.members
        n = len(members)
        start = self._next
        best = start
        fewest = members[start].in_flight
        for step in range(1, n):
            i = (start + step) % n
            if members[i].in_flight < fewest:
                best, fewest = i, members[i].in_flight
        self._next = (best + 1) % n
        return best

    def issue(
        self,
        body: bytes | Mapping[str, Any],
        on_done: Callable[[RequestRecord], object],
        *,
        path: str = CHAT_PATH,
        sample_index: int = 0,
        sample_id: str | None = None,
        t_sched: int | None = None,
        on_first: Callable[[Exchange, int], object] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """:meth:`Client.issue` on the replica :meth:`_pick` chooses (or,
        for ``headers`` seen before, the one that served them: module doc);
        the record comes back with its ``endpoint`` set."""
        if headers:
            key = tuple(sorted(headers.items()))
            i = self._affinity.get(key, -1)
            if i < 0:
                i = self._affinity[key] = self._pick()
        else:
            i = self._pick()
        tag = self._on_done[i]
        self.members[i].issue(
            body,
            lambda record: on_done(tag(record)),
            path=path,
            sample_index=sample_index,
            sample_id=self.new_sample_id() if sample_id is None else sample_id,
            t_sched=t_sched,
            on_first=on_first,
            headers=headers,
        )

    async def request(
        self,
        body: bytes | Mapping[str, Any],
        *,
        path: str = CHAT_PATH,
        sample_index: int = 0,
        sample_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> RequestRecord:
        """One request on the replica :meth:`_pick` chooses, awaited."""
        return await awaited_record(
            self.issue, body, path=path, sample_index=sample_index, sample_id=sample_id,
            headers=headers,
        )  # fmt: skip

    @staticmethod
    def _tagging(index: int) -> Callable[[RequestRecord], RequestRecord]:
        def tag(record: RequestRecord) -> RequestRecord:
            return msgspec.structs.replace(record, endpoint=index)

        return tag


AnyClient = Client | Replicas
"""What a scheduler issues on: one endpoint's client, or several replicas."""


def endpoint_shares(records: Sequence[RequestRecord], urls: Sequence[str]) -> list[dict[str, Any]]:
    """Per endpoint, in ``urls`` order: ``{"url", "issued", "completed",
    "failed"}`` of ``records`` (``result_summary.json``'s
    ``mlpe_fast.endpoints``), so that a user sees every replica got its share.

    Raises:
        ValueError: a record names an endpoint outside ``urls``.
    """
    columns = as_columns(records)
    issued = np.zeros(len(urls), np.int64)
    failed = np.zeros(len(urls), np.int64)
    for block in columns.blocks():  # a block at a time: no whole column (issue 23)
        endpoint = block.column("endpoint")
        outside = (endpoint < 0) | (endpoint >= len(urls))
        if outside.any():
            index = int(endpoint[outside][0])
            raise ValueError(f"a record names endpoint {index}, but {len(urls)} were given")
        issued += np.bincount(endpoint, minlength=len(urls))
        failed += np.bincount(endpoint[~block.ok], minlength=len(urls))
    return [
        {"url": url, "issued": n, "completed": n - f, "failed": f}
        for url, n, f in zip(urls, issued.tolist(), failed.tolist(), strict=True)
    ]
