"""The use cases of Headway, each one transaction, behind one façade that REST, the live
stream and `/mcp` call and nothing else.

- `spaces`: creating a space, knowing one exists;
- `reads`: space reads, and the one renderer of every answer that shows tasks;
- `tasks`: creating and reading tasks, and reports (the hot path);
- `families`: a task with its children, and the record of a finish;
- `caps`, `deletes`, `activity`: what a space may hold, deleting tasks and spaces, and
  when each space was last used (for retention);
- `webhooks`, `channels`, `shares`: a space's webhooks, notification channels and share
  links; `badges`: what a share link's badges show;
- `idempotency`: creates made once, however often they are retried with one key;
- `unit`: the unit of work every write runs in, which publishes what it changed.

Every create passes the disk budget first (`headway.ops.disk`): when the database's storage
runs short, creates are refused before anything is written, and reports go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..caches.spaces import ShownTasks, SmallSpaces
from ..coherence import Coherence
from ..domain.clock import Clock
from ..domain.schemas import CreateChannel, CreateSpace, CreateTask, CreateWebhook
from ..domain.tasks import Report, TaskRow, TaskView
from ..ops.dependencies import unavailable
from ..ops.disk import DiskBudget
from ..progress import NO_CLIENT, ProgressStore
from ..storage.database import Database
from .activity import Activity
from .badges import Badges
from .caps import Caps
from .channels import ChannelRules, Channels
from .context import Stores
from .deletes import Deletes
from .estimates import Estimates
from .families import Families
from .idempotency import Idempotency, Keys
from .jobs import Jobs
from .reads import SPACE_PAGE, SpaceReads, parse_limit
from .shares import Shares
from .spaces import Head, Spaces
from .tasks import Tasks
from .unit import Cache, Wake, Writes
from .webhooks import Webhooks

__all__ = [
    "SPACE_PAGE",
    "Cache",
    "ChannelRules",
    "Idempotency",
    "Service",
    "Wake",
    "Writes",
    "parse_limit",
]


class Service:
    """Headway's rules applied to storage: the database holds spaces and tasks, the
    progress store holds live state, and the outbox holds completion events.

    Families and spaces' rows are cached as far as `coherence` vouches for them: freely
    where this process is the only one serving, else only while their versions in Redis
    are those they were read at (see `coherence`, `caches.families`).
    """

    def __init__(
        self,
        db: Database,
        progress: ProgressStore,
        clock: Clock,
        coherence: Coherence,
        *,
        allow_private_webhooks: bool = False,
        webhooks_per_space: int = 20,
        shares_per_space: int = 100,
        channel_rules: ChannelRules | None = None,
        outbox_per_endpoint: int = 10_000,
        disk: DiskBudget | None = None,
        wake: Wake | None = None,
    ) -> None:
        # Admits creates while the database has room (a budget of the defaults if none).
        self.disk = disk or DiskBudget(db)
        # Who a write wakes once it is over: the worker, the sweeper (see `service.unit`).
        self.writes = Writes(db, progress, coherence, wake)
        self.stores = stores = Stores(db, progress, clock, self.writes)
        self.db, self.progress, self.clock = db, progress, clock
        self.feed = coherence.feed
        self.activity = Activity(clock)
        self.spaces = Spaces(stores)
        self.reads = SpaceReads(stores, self.spaces, activity=self.activity)
        self.families = Families(
            stores,
            coherence.family_cache(),
            outbox_per_endpoint=outbox_per_endpoint,
        )
        self.caps = Caps(stores)
        self.tasks = Tasks(stores, self.families, self.caps, self.activity)
        self.deletes = Deletes(stores, self.families)
        # Idempotency keys' first answers, as a whole (each create reads and writes its own).
        self.keys = Keys(stores)
        self.webhooks = Webhooks(
            stores,
            self.spaces,
            allow_private=allow_private_webhooks,
            per_space=webhooks_per_space,
        )
        self.shares = Shares(stores, self.spaces, per_space=shares_per_space)
        self.estimates = Estimates(stores, self.families, self.shares)
        self.badges = Badges(stores, self.shares, self.reads, self.tasks, self.estimates)
        self.jobs = Jobs(stores, self.spaces)
        self.channels = Channels(
            stores,
            self.spaces,
            channel_rules or ChannelRules((), allow_private_webhooks, 20, None),
        )
        # A space with its top-level tasks, whole or a page at a time (see `SpaceReads`).
        self.get_space = self.reads.get
        self.read_space = self.reads.read

    @property
    def shares_per_space(self) -> int:
        return self.shares.per_space

    @shares_per_space.setter
    def shares_per_space(self, cap: int) -> None:
        self.shares.per_space = cap

    # The caches, as tests reach them.
    @property
    def _small(self) -> SmallSpaces | None:
        return self.reads.small

    @_small.setter
    def _small(self, small: SmallSpaces | None) -> None:
        self.reads.hold(small)

    @property
    def _shown(self) -> ShownTasks | None:
        return self.reads.shown

    @property
    def _task_creates(self) -> Any:
        return self.tasks.creates

    async def _family(self, task_uuid: str) -> tuple[TaskRow, Any]:
        return await self.families.get(task_uuid)

    # --- Spaces and their reads ------------------------------------------------------------

    async def create_space(
        self, body: CreateSpace, idempotency: Idempotency | None = None
    ) -> dict[str, Any]:
        self.disk.admit()
        return await self.spaces.create(body, idempotency)

    async def space_head(self, space_uuid: str) -> Head:
        """A space's `{"title", "icon"}`; NotFound if there is no such space."""
        return await self.spaces.head(space_uuid)

    # --- Tasks and reports ----------------------------------------------------------------

    async def create_task(
        self,
        space_uuid: str,
        body: CreateTask,
        idempotency: Idempotency | None = None,
        client: str = NO_CLIENT,
    ) -> dict[str, Any]:
        """A new task; refused before anything is written when the disk runs short, or
        when `client` holds its whole share of the progress budget."""
        self.disk.admit()
        try:
            await self.progress.admit_client(client)
        except Exception as exc:
            # A create needs only the database: with the progress store away, the share
            # cannot be counted, and the task's reports wait for the store anyway.
            if not unavailable(exc):
                raise
        return await self.tasks.create(space_uuid, body, idempotency)

    async def delete_task(self, task_uuid: str) -> None:
        await self.deletes.task(task_uuid)

    async def delete_space(self, space_uuid: str) -> None:
        await self.deletes.space(space_uuid)

    async def get_task(self, task_uuid: str) -> TaskView:
        return await self.tasks.get(task_uuid)

    async def report(self, task_uuid: str, report: Report, client: str = NO_CLIENT) -> TaskView:
        return await self.tasks.report(task_uuid, report, client)

    async def event_views(self, task_uuids: Sequence[str]) -> list[TaskView]:
        return await self.tasks.event_views(task_uuids)

    # --- Webhooks and share links ---------------------------------------------------------

    async def create_webhook(
        self, space_uuid: str, body: CreateWebhook, idempotency: Idempotency | None = None
    ) -> dict[str, Any]:
        self.disk.admit()
        return await self.webhooks.create(space_uuid, body, idempotency)

    async def list_webhooks(self, space_uuid: str) -> list[dict[str, Any]]:
        return await self.webhooks.list(space_uuid)

    async def delete_webhook(self, space_uuid: str, webhook_uuid: str) -> None:
        await self.webhooks.delete(space_uuid, webhook_uuid)

    async def create_share(
        self, space_uuid: str, idempotency: Idempotency | None = None
    ) -> dict[str, Any]:
        self.disk.admit()
        return await self.shares.create(space_uuid, idempotency)

    async def list_shares(self, space_uuid: str) -> list[dict[str, str]]:
        return await self.shares.list(space_uuid)

    async def delete_share(self, space_uuid: str, share_uuid: str) -> None:
        await self.shares.delete(space_uuid, share_uuid)

    async def space_of_share(self, share_uuid: str) -> str:
        return await self.shares.space_of(share_uuid)

    # --- Notification channels ------------------------------------------------------------

    async def create_channel(
        self, space_uuid: str, body: CreateChannel, idempotency: Idempotency | None = None
    ) -> dict[str, Any]:
        self.disk.admit()
        return await self.channels.create(space_uuid, body, idempotency)
