"""Notification channels: the Apprise URLs a space's finishes, failures and stalls are
told to, registered, listed (redacted, with their last deliveries), tested and removed."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ..domain import tasks as domain
from ..domain.errors import NotFound, Unprocessable
from ..domain.schemas import CreateChannel
from ..domain.tasks import canonical_uuid
from ..notify.schemes import DEFAULT_SCHEMES
from ..storage import channel_queue, channels, outbox, shares
from ..storage.channels import ChannelRow
from ..storage.database import Statements
from .context import Stores, canonical
from .idempotency import Idempotency, Keys
from .spaces import Spaces

NO_CHANNEL = "No such channel in this space."
BUSY = (
    "not sent: this channel's host or space has its most messages on their way already; "
    "try again in a few seconds"
)


@dataclass(frozen=True, slots=True)
class ChannelRules:
    """What the operator allows (see CONTRACT "Notification channels")."""

    schemes: tuple[str, ...] | None  # None: `notify.schemes.DEFAULT_SCHEMES`
    allow_private: bool
    per_space: int
    public_url: str | None


class Channels:
    """Registers, lists, tests and removes a space's channels (at most `per_space`)."""

    def __init__(self, stores: Stores, spaces: Spaces, rules: ChannelRules) -> None:
        self._stores = stores
        self._spaces = spaces
        self.rules = rules
        self.keys = Keys(stores)

    async def create(
        self, space_uuid: str, body: CreateChannel, idempotency: Idempotency | None = None
    ) -> dict[str, Any]:
        """Register a channel: its URL checked (scheme allowed, Apprise can read it, each
        host it names public), shown back only redacted. With an `idempotency` key, the
        first answer under it again, if there is one."""
        self._stores.disk.admit()
        space_key = await self._spaces.existing(space_uuid)
        if (first := await self.keys.first_answer(space_key, idempotency)) is not None:
            return first
        checked = await self._checked(body.url)
        if body.live:
            from ..notify import guard
            from ..notify.live_send import cannot_edit

            if (why := await guard.run(cannot_edit, checked)) is not None:
                raise Unprocessable(why)
        share_uuid = None
        if body.share_uuid is not None:
            share_uuid = canonical_uuid(body.share_uuid)
            fetch = self._stores.db.fetch
            if share_uuid is None or await shares.space_of_share(fetch, share_uuid) != space_key:
                raise Unprocessable("share_uuid is not a share link of this space.")
        events = tuple(event for event in channels.EVENTS if event in set(body.events))
        row = ChannelRow(
            str(uuid.uuid4()),
            checked.redacted,
            events,
            body.steps,
            body.stalled_after,
            share_uuid,
            self._stores.clock.now_us(),
            body.live,
        )
        cap = self.rules.per_space

        async def write(st: Statements) -> dict[str, Any]:
            if not await channels.insert_channel(st, space_key, row, body.url, cap=cap):
                raise Unprocessable(f"A space holds at most {cap} channels; delete one first.")
            return {key: value for key, value in _shown(row, []).items() if key != "deliveries"}

        return await self.keys.added_to_space(space_key, idempotency, write)

    async def _checked(self, url: str) -> Any:
        from ..delivery.webhooks import RefusedAddress
        from ..notify import guard, urls

        # Apprise loads on first use (about 0.4 s): on the notify threads, not this loop.
        checked = await guard.run(urls.check_channel_url, url, self.schemes)
        try:
            await urls.check_channel_hosts(checked, allow_private=self.rules.allow_private)
        except RefusedAddress as exc:
            raise Unprocessable(
                f"url is refused: {exc}. Channels must reach a public address."
            ) from None
        return checked

    @property
    def schemes(self) -> tuple[str, ...]:
        """The Apprise schemes channels may use."""
        return self.rules.schemes or DEFAULT_SCHEMES

    async def list(self, space_uuid: str) -> list[dict[str, Any]]:
        """The space's channels, oldest first, each with its last deliveries."""
        space_key = await self._spaces.existing(space_uuid)
        async with self._stores.db.read() as fetch:
            found = await channels.list_channels(fetch, space_key)
            logs = await outbox.logs(fetch, outbox.CHANNELS, [row.uuid for row in found])
        return [_shown(row, logs[row.uuid]) for row in found]

    async def delete(self, space_uuid: str, channel_uuid: str) -> None:
        await self._spaces.remove_held(
            space_uuid, channel_uuid, channels.delete_channel, NO_CHANNEL
        )

    async def test(self, space_uuid: str, channel_uuid: str) -> dict[str, Any]:
        """Send a test message now; the outcome, as the channel's deliveries show it. Not
        sent while the channel's host or space has its most sends in flight."""
        from ..notify import guard, send

        space_key = await self._spaces.existing(space_uuid)
        key = canonical(channel_uuid, NO_CHANNEL)
        found = await channels.target(self._stores.db.fetch, space_key, key)
        if found is None:
            raise NotFound(NO_CHANNEL)
        # A test message takes its place among the channels' sends (`guard.admit`), so that
        # test messages cannot take the sending threads from every other channel.
        place = guard.admit(space_key, guard.receiver_host(found.url))
        if place is None:
            outcome = send.SendOutcome(False, BUSY)
        else:
            try:
                outcome = await send.send_test(
                    found.url,
                    allow_private=self.rules.allow_private,
                    schemes=self.schemes,
                    space_title=found.space_title,
                    link=self.link(found.share_uuid),
                )
            finally:
                place.release()
        now_us = self._stores.clock.now_us()
        result = "delivered" if outcome.delivered else "failed"
        async with self._stores.writes.transaction() as unit:
            await channel_queue.log(unit.st, key, now_us, "test", result, outcome.detail or None)
        return shown_delivery((now_us, "test", result, outcome.detail or None))

    def link(self, share_uuid: str | None) -> str | None:
        return read_only_link(self.rules.public_url, share_uuid)


def read_only_link(public_url: str | None, share_uuid: str | None) -> str | None:
    """The read-only link a message shows, when the channel names a share link and the
    operator set `HEADWAY_PUBLIC_URL`."""
    if share_uuid is None or not public_url:
        return None
    return f"{public_url.rstrip('/')}/shared/{share_uuid}"


def shown_delivery(entry: tuple[int, str, str, str | None]) -> dict[str, Any]:
    """One delivery of a channel or webhook as its list shows it, from its
    (at, event, outcome, detail) log entry."""
    at_us, event, outcome, detail = entry
    return {"at": domain.format_ts(at_us), "event": event, "outcome": outcome, "detail": detail}


def _shown(row: ChannelRow, log: list[tuple[int, str, str, str | None]]) -> dict[str, Any]:
    return {
        "uuid": row.uuid,
        "url": row.redacted,
        "events": list(row.events),
        "steps": row.steps,
        "stalled_after": row.stalled_after_s,
        "share_uuid": row.share_uuid,
        "created_at": domain.format_ts(row.created_at_us),
        "live": row.live,
        "deliveries": [shown_delivery(entry) for entry in log],
    }
