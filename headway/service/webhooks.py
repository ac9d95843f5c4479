"""Webhooks: the signed HTTP endpoints a space's completion events are delivered to."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from ..delivery import webhooks
from ..domain.errors import Unprocessable
from ..domain.schemas import CreateWebhook
from ..storage import outbox
from ..storage import webhooks as webhook_rows
from ..storage.database import Statements
from .channels import shown_delivery
from .context import Stores
from .idempotency import Idempotency, Keys
from .spaces import Spaces

LOOKUP_TIMEOUT_S = 10.0  # a registration's name lookup, as a delivery attempt's


class Webhooks:
    """Registers, lists and deletes a space's webhooks (at most `per_space` each)."""

    def __init__(
        self, stores: Stores, spaces: Spaces, *, allow_private: bool, per_space: int
    ) -> None:
        self._stores = stores
        self._spaces = spaces
        self.allow_private = allow_private
        self.per_space = per_space
        self.keys = Keys(stores)

    async def create(
        self, space_uuid: str, body: CreateWebhook, idempotency: Idempotency | None = None
    ) -> dict[str, Any]:
        """Register a webhook; the answer holds its signing secret, shown only here. With
        an `idempotency` key, the first answer under it again, if there is one."""
        self._stores.disk.admit()
        space_key = await self._spaces.existing(space_uuid)
        if (first := await self.keys.first_answer(space_key, idempotency)) is not None:
            return first
        url = webhooks.check_url_syntax(body.url)
        try:
            # On the webhooks' own threads (`webhooks.lookup`), and bounded: a name whose
            # resolver hangs holds neither the request nor the default executor.
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                await webhooks.check_destination(url, allow_private=self.allow_private)
        except webhooks.RefusedAddress as exc:
            raise Unprocessable(
                f"url is refused: {exc}. Webhooks must reach a public address."
            ) from None
        except TimeoutError:
            raise Unprocessable(
                f"url is refused: its host did not resolve within {LOOKUP_TIMEOUT_S:g} s."
            ) from None
        webhook_uuid, secret = str(uuid.uuid4()), webhooks.new_secret()
        cap, now_us = self.per_space, self._stores.clock.now_us()

        async def write(st: Statements) -> dict[str, Any]:
            if not await webhook_rows.insert_webhook(
                st, webhook_uuid, space_key, body.url, secret, now_us, cap=cap
            ):
                raise Unprocessable(f"A space holds at most {cap} webhooks; delete one first.")
            return {"uuid": webhook_uuid, "url": body.url, "secret": secret}

        return await self.keys.added_to_space(space_key, idempotency, write)

    async def list(self, space_uuid: str) -> list[dict[str, Any]]:
        """The space's webhooks, oldest first, each with its last deliveries."""
        space_key = await self._spaces.existing(space_uuid)
        async with self._stores.db.read() as fetch:
            found = await webhook_rows.list_webhooks(fetch, space_key)
            logs = await outbox.logs(fetch, outbox.WEBHOOKS, [hook for hook, _ in found])
        return [
            {"uuid": hook, "url": url, "deliveries": [shown_delivery(e) for e in logs[hook]]}
            for hook, url in found
        ]

    async def delete(self, space_uuid: str, webhook_uuid: str) -> None:
        missing = "No such webhook in this space."
        await self._spaces.remove_held(
            space_uuid, webhook_uuid, webhook_rows.delete_webhook, missing
        )
