"""The use cases of Headway, each one transaction. `Service` makes them once and is the
one door to them: REST, the live streams, `/mcp`, the pages and the background loops
call `service.tasks.report(...)`, `service.shares.create(...)` and so on, and nothing
outside this package reaches its stores.

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

from ..caches.spaces import SmallSpaces
from ..coherence import Coherence
from ..domain.clock import Clock
from ..ops.disk import DiskBudget
from ..progress import ProgressStore
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
from .removal import Removal
from .shares import Shares
from .spaces import Spaces
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
        self.stores = stores = Stores(db, progress, clock, self.writes, self.disk)
        self.db, self.progress, self.clock = db, progress, clock
        self.feed = coherence.feed
        self.activity = Activity(clock, db)
        self.spaces = Spaces(stores)
        self.reads = SpaceReads(stores, self.spaces, self.activity)
        self.families = Families(stores, coherence.family_cache(), outbox_per_endpoint)
        self.caps = Caps()
        self.tasks = Tasks(stores, self.families, self.caps, self.activity)
        self.deletes = Deletes(stores, self.families)
        # Deleted spaces' rows, removed by the sweeper (`headway.background.sweeper`).
        self.removal = Removal(stores)
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

    # The caches, as tests reach them.
    @property
    def _small(self) -> SmallSpaces | None:
        return self.reads.small

    @_small.setter
    def _small(self, small: SmallSpaces | None) -> None:
        self.reads.hold(small)
