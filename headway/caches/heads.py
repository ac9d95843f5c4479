"""Spaces' `{"title", "icon"}`: a space never changes them, so a read of a space seen
before needs no query for them."""

from __future__ import annotations

from typing import ClassVar

from ..domain.tasks import Changed
from .bounded import Bounded

# Spaces whose heads are kept.
SPACE_HEADS = 10_000

Head = dict[str, str | None]


class SpaceHeads:
    """The `{"title", "icon"}` of the spaces last read, at most SPACE_HEADS of them (past
    that, the one held longest goes). Nothing changes them; the space's delete drops them."""

    hears: ClassVar[frozenset[Changed]] = frozenset({Changed.DROP})

    def __init__(self, held: int = SPACE_HEADS) -> None:
        self._heads: Bounded[str, Head] = Bounded(count=held)

    def get(self, space_uuid: str) -> Head | None:
        return self._heads.get(space_uuid)

    def keep(self, space_uuid: str, title: str | None, icon: str | None) -> Head:
        head: Head = {"title": title, "icon": icon}
        self._heads.put(space_uuid, head)
        return head

    def on_change(
        self, kind: Changed, space_uuid: str, task_uuid: str | None, parent_uuid: str | None
    ) -> None:
        """After the space's delete (no change of tasks changes its title or icon)."""
        self._heads.forget(space_uuid)
