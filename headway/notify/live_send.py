"""Live messages' sending: one message per task on a service that can edit, created once
and edited in place. The code is in `live_services` (one module per service); this is its
interface."""

from .live_services import LIVE_SERVICES, LiveOutcome, LiveText, cannot_edit, post

__all__ = ["LIVE_SERVICES", "LiveOutcome", "LiveText", "cannot_edit", "post"]
