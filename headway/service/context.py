"""What every use case works with: the stores, the clock, where writes are opened, and
the messages of the errors they share."""

from __future__ import annotations

from dataclasses import dataclass

from ..domain.clock import Clock
from ..domain.errors import NotFound
from ..domain.tasks import canonical_uuid
from ..ops.disk import DiskBudget
from ..progress import ProgressStore
from ..storage.database import Database
from .unit import Writes

NO_SPACE = "No such space: check the space uuid."
NO_TASK = "No such task: check the task uuid."
NO_SHARE = "No such share link: it was revoked, or never existed."
NOT_A_PARENT = "parent_uuid is not a task of this space."


def canonical(value: str, missing: str) -> str:
    """`value` as a canonical uuid; NotFound(`missing`) if it is not one."""
    key = canonical_uuid(value)
    if key is None:
        raise NotFound(missing)
    return key


@dataclass(frozen=True, slots=True)
class Stores:
    """The database (spaces, tasks, the outbox), the progress store (live state), the
    clock, `writes`, where every write opens its unit of work (see `service.unit`), and
    `disk`, the budget every create passes first (see `headway.ops.disk`)."""

    db: Database
    progress: ProgressStore
    clock: Clock
    writes: Writes
    disk: DiskBudget
