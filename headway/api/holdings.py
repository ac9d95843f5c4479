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
        network = network_of(client)
        in_network = self._by_network.get(network, 0)
        for count, most, reason, whose in (
            (held, self.per_client, "rate_streams", "Your address"),
            (in_network, self.per_network, "network_streams", f"Your network ({network})"),
        ):
            if most is not None and count >= most:
                metrics.refused(reason)
                raise TooManyRequests(
                    f"{whose} holds {count} {self._what}, the most one may; close some first.",
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
