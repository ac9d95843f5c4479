"""What clients hold at once (live streams), capped per client address and per network
(see `api.addresses`)."""

from __future__ import annotations

from ..domain.errors import TooManyRequests
from ..ops import metrics
from .addresses import network_of


class Holdings:
    """What clients hold at once (live streams), per client address and per network
    (`network_of`), each capped (None: no cap). `take` refuses with 429 beyond a cap."""

    def __init__(self, per_client: int | None, per_network: int | None, what: str) -> None:
        self.per_client = per_client
        self.per_network = per_network
        self._what = what
        self._by_client: dict[str, int] = {}
        self._by_network: dict[str, int] = {}

    def take(self, client: str) -> None:
        """Count one more held by `client`; TooManyRequests (nothing counted) beyond a cap."""
        held = self._by_client.get(client, 0)
        if self.per_client is not None and held >= self.per_client:
            metrics.refused("rate_streams")
            raise TooManyRequests(
                f"Your address holds {held} {self._what}, the most one may; close some first.",
                headers={"retry-after": "5"},
            )
        network = network_of(client)
        in_network = self._by_network.get(network, 0)
        if self.per_network is not None and in_network >= self.per_network:
            metrics.refused("network_streams")
            raise TooManyRequests(
                f"Your network ({network}) holds {in_network} {self._what}, the most one "
                "may; close some first.",
                headers={"retry-after": "5"},
            )
        self._by_client[client] = held + 1
        self._by_network[network] = in_network + 1

    def give_back(self, client: str) -> None:
        """One held by `client` is let go."""
        for counts, key in ((self._by_client, client), (self._by_network, network_of(client))):
            left = counts[key] - 1
            if left:
                counts[key] = left
            else:
                del counts[key]
