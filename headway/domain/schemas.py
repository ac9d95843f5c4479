"""Request and response models shared by REST, MCP and the OpenAPI description.

Request bodies are decoded straight into these structs, so a limit written here is
enforced everywhere the body is accepted and published in the OpenAPI document.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from .estimates import Estimate
from .jobs import Job, Usual
from .tasks import format_ts

MAX_BODY = 65_536
MAX_TEXT = 200
MAX_VALUES = 64
MAX_KEY = 64
MAX_VALUE_TEXT = 1_024
MAX_ICON = 64  # code points: the one grapheme cluster of an icon fits the icon column

Text = Annotated[str, Meta(max_length=MAX_TEXT)]
UuidText = Annotated[str, Meta(max_length=64, extra_json_schema={"format": "uuid"})]
Count = Annotated[int, Meta(ge=0)] | Annotated[float, Meta(ge=0)]
ValueKey = Annotated[str, Meta(min_length=1, max_length=MAX_KEY)]
Value = Annotated[str, Meta(max_length=MAX_VALUE_TEXT)] | int | float | bool
Values = Annotated[dict[ValueKey, Value], Meta(max_length=MAX_VALUES)]
_FITS_FLOAT = "Finite, and within a 64-bit float (at most about 1.8e308)."


class CreateSpace(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `POST /spaces`."""

    title: Text | None = None
    icon: (
        Annotated[str, Meta(description="One character, counted in grapheme clusters.")] | None
    ) = None


class CreateTask(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `POST /spaces/{space_uuid}/tasks`."""

    title: Text | None = None
    source: Annotated[Text, Meta(description="What is reporting.")] | None = None
    parent_uuid: (
        Annotated[
            UuidText, Meta(description="Makes the new task a step of an existing top-level task.")
        ]
        | None
    ) = None


_VALUES = (
    "Flat extras; omitted clears them. `log`: one line, the latest. `error`: a non-empty "
    "string marks the task, once finished, as failed (a parent also fails through a step). "
    "The outcome is decided by the report that finishes the task and kept: a later report "
    "replaces its progress but not its `error`."
)


class ReportBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `PUT /tasks/{task_uuid}`: the task's whole new state."""

    current: (
        Annotated[Count, Meta(description=f"A count, not a percentage. {_FITS_FLOAT}")]
        | UnsetType
        | None
    ) = UNSET
    end: (
        Annotated[Count, Meta(description=f"Omit for a count with no total. {_FITS_FLOAT}")]
        | UnsetType
        | None
    ) = UNSET
    values: Annotated[Values, Meta(description=_VALUES)] | UnsetType | None = UNSET
    done: (
        Annotated[bool, Meta(description="Finishes the task. Alone, keeps the last numbers.")]
        | UnsetType
    ) = UNSET


class CreateWebhook(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `POST /spaces/{space_uuid}/webhooks`."""

    url: Annotated[str, Meta(max_length=2048, description="An http(s) URL on a public address.")]


ChannelEvent = Literal["completed", "failed", "stalled", "late"]
MIN_STALLED_AFTER_S = 60
MAX_STALLED_AFTER_S = 604_800


class CreateChannel(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `POST /spaces/{space_uuid}/channels`."""

    url: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=2048,
            description="An Apprise URL (ntfy://, tgram://, slack://, mailto://...).",
        ),
    ]
    events: Annotated[
        list[ChannelEvent],
        Meta(
            min_length=1,
            max_length=4,
            description="What the channel hears: finishes, failures, stalls, and runs late "
            "against their job's usual duration (once a run).",
        ),
    ] = msgspec.field(default_factory=lambda: ["completed"])
    steps: Annotated[bool, Meta(description="Hear steps (child tasks) too.")] = False
    stalled_after: Annotated[
        int,
        Meta(
            ge=MIN_STALLED_AFTER_S,
            le=MAX_STALLED_AFTER_S,
            description="Seconds without a report, or without a change of `current`, "
            "after which an active task is stalled.",
        ),
    ] = 600
    share_uuid: (
        Annotated[UuidText, Meta(description="A share link of the space, shown in messages.")]
        | None
    ) = None
    live: Annotated[
        bool,
        Meta(
            description="Keep one message per task up to date, edited in place as it moves "
            "(ntfy, Telegram, Discord, Slack with a bot token, Matrix); events still go as "
            "their own messages."
        ),
    ] = False


class TestChannel(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `POST /spaces/{space_uuid}/channels/{channel_uuid}/test`: `{}` or none."""


class CreateShare(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `POST /spaces/{space_uuid}/shares`: `{}` (a link has nothing to set)."""


# --- Responses (for the OpenAPI description; the service returns plain dicts) -------------


UUID_FORMAT = Meta(extra_json_schema={"format": "uuid"})
Uuid = Annotated[str, UUID_FORMAT]
Timestamp = Annotated[str, Meta(extra_json_schema={"format": "date-time"})]


class ProgressOut(msgspec.Struct):
    current: int | float | None
    end: int | float | None
    ratio: Annotated[float, Meta(ge=0, le=1)] | None
    values: Annotated[
        dict[str, str | int | float | bool],
        Meta(
            description="As last reported. A finished task whose `error` is a non-empty "
            "string has failed, as has a finished parent any of whose steps failed. A "
            "finished task's `error` is the one kept with its finish, whatever a later "
            'report sent: a failed task reads its error (only `{"error": ...}` once its '
            "progress expired or the server restarted), a succeeded one none."
        ),
    ]
    updated_at: Timestamp | None
    aggregated: bool


class TaskOut(msgspec.Struct):
    uuid: Uuid
    space_uuid: Uuid
    parent_uuid: Uuid | None
    title: str | None
    source: str | None
    created_at: Timestamp
    finished_at: Timestamp | None
    duration: Annotated[int, Meta(description="Whole seconds, set once at completion.")] | None
    progress: ProgressOut | None
    children: list[TaskOut]


class SpaceCreated(msgspec.Struct):
    uuid: Annotated[
        str, Meta(description="The space's credential: keep it like an API token."), UUID_FORMAT
    ]
    title: str | None
    icon: str | None


class SpaceOut(msgspec.Struct):
    title: str | None
    icon: str | None
    tasks: list[TaskOut]


class SharedTaskOut(msgspec.Struct):
    """A task as a share link shows it: no uuid of the task, its parent or its space."""

    id: Annotated[
        str,
        Meta(description="Opaque, stable for this task under this link; reveals no uuid."),
    ]
    parent_id: Annotated[str, Meta(description="The parent's id; null at top level.")] | None
    title: str | None
    source: str | None
    created_at: Timestamp
    finished_at: Timestamp | None
    duration: int | None
    progress: ProgressOut | None
    children: list[SharedTaskOut]


class SharedSpaceOut(msgspec.Struct):
    title: str | None
    icon: str | None
    tasks: list[SharedTaskOut]


class ShareCreated(msgspec.Struct):
    uuid: Annotated[
        str,
        Meta(description="The link's own uuid: it reads the space, and nothing else."),
        UUID_FORMAT,
    ]
    url: Annotated[str, Meta(description="The link's path: /shared/{uuid}.")]
    created_at: Timestamp


class JobsOut(msgspec.Struct):
    """A space's jobs: its tasks grouped by title, source and parent's title, newest
    activity first, each with its counts, its usual duration and its newest runs."""

    jobs: list[Job]


class EstimateOut(msgspec.Struct):
    """When a task will end: from the reports the server received (its rate) and from how
    long its job's succeeded runs usually take (blended, the rate weighing more as the run
    nears its end). A finished task: `remaining_s` 0, `eta_at` its `finished_at`."""

    elapsed_s: Annotated[float, Meta(ge=0, description="Since the task was created.")]
    rate_per_s: (
        Annotated[
            float,
            Meta(
                ge=0,
                description="Units of `current` a second, from the server's own clock; "
                "null before 2 steady reports spanning 1 to 10 s, or else before 3 "
                "spanning 10 s or 2 % of `end`.",
            ),
        ]
        | None
    )
    remaining_s: Annotated[float, Meta(ge=0, description="Null: not known.")] | None
    eta_at: Annotated[str | None, Meta(extra_json_schema={"format": "date-time"})]
    basis: Annotated[
        Literal["rate", "usual", "blend"] | None,
        Meta(description="What `remaining_s` comes from; null when it is not known."),
    ]
    usual: Usual | None
    late: Annotated[
        bool,
        Meta(
            description="Running beyond max(1.2 x p95, p50 + 60 s) of its job's usual "
            "duration, or foreseen to, once 10 % done. Never on a finished task."
        ),
    ]

    @classmethod
    def of(cls, found: Estimate) -> EstimateOut:
        """An estimate as the API answers it: seconds to the millisecond, instants as text."""
        return cls(
            elapsed_s=round(found.elapsed_s, 3),
            rate_per_s=None if found.rate_per_s is None else round(found.rate_per_s, 6),
            remaining_s=None if found.remaining_s is None else round(found.remaining_s, 3),
            eta_at=None if found.eta_us is None else format_ts(found.eta_us),
            basis=found.basis,
            usual=found.usual,
            late=found.late,
        )


class ShareOut(msgspec.Struct):
    uuid: Uuid
    url: str
    created_at: Timestamp


class ShieldsOut(msgspec.Struct, rename="camel"):
    """A badge in the JSON of Shields' endpoint badge (schemaVersion 1)."""

    schema_version: Annotated[int, Meta(ge=1, le=1, description="Always 1.")]
    label: Annotated[str, Meta(description="The left text.")]
    message: Annotated[str, Meta(min_length=1, description="The right text: the state.")]
    color: Annotated[str, Meta(description="The right colour, hex without #.")]
    label_color: Annotated[str, Meta(description="The left colour, hex without #.")]
    is_error: Annotated[bool, Meta(description="True for a failure: its colour is kept.")]
    style: Annotated[str, Meta(description="flat, flat-square or for-the-badge.")]
    cache_seconds: Annotated[int, Meta(ge=300, description="How long Shields keeps it.")]


class TaskCreated(msgspec.Struct):
    uuid: Uuid


class WebhookCreated(msgspec.Struct):
    uuid: Uuid
    url: str
    secret: Annotated[str, Meta(description="`whsec_` + base64; shown only here.")]


class WebhookDelivery(msgspec.Struct):
    at: Timestamp
    event: Annotated[str, Meta(description="The event's type: task.completed.")]
    outcome: Annotated[
        str,
        Meta(
            description="delivered, failed (tried again) or given_up (after the last "
            "attempt, undelivered for HEADWAY_DELIVERY_GIVE_UP, or pushed out of a full "
            "queue by newer events)."
        ),
    ]
    detail: str | None


class WebhookOut(msgspec.Struct):
    uuid: Uuid
    url: str
    deliveries: Annotated[
        list[WebhookDelivery], Meta(description="Its last 20 deliveries, newest first.")
    ]


class ChannelOut(msgspec.Struct):
    uuid: Uuid
    url: Annotated[str, Meta(description="The Apprise URL, its tokens redacted.")]
    events: list[ChannelEvent]
    steps: bool
    stalled_after: int
    share_uuid: Uuid | None
    created_at: Timestamp
    live: bool


class ChannelDelivery(msgspec.Struct):
    at: Timestamp
    event: Annotated[
        str,
        Meta(
            description="completed, failed, stalled, recovered, late, digest (several), "
            "test, or live (a live message created, shown finished, or failed)."
        ),
    ]
    outcome: Annotated[str, Meta(description="delivered, failed (tried again) or given_up.")]
    detail: str | None


class ChannelWithDeliveries(ChannelOut):
    deliveries: list[ChannelDelivery]


class Deleted(msgspec.Struct):
    deleted: bool


class ErrorOut(msgspec.Struct):
    error: str
