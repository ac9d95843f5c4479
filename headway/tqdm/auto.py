"""`from headway.tqdm.auto import tqdm, trange`: like `tqdm.auto`, a notebook widget in
Jupyter and a text bar elsewhere, also reported to Headway."""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm as auto_tqdm

from ..client.tqdm import ReportingBar, attach


class tqdm(ReportingBar, auto_tqdm):
    """`tqdm.auto.tqdm`, taking also `client`, `space`, `task` and `min_interval`."""


def trange(*args: Any, **kwargs: Any) -> tqdm:
    """`tqdm(range(*args), **kwargs)`."""
    return tqdm(range(*args), **kwargs)


__all__ = ["attach", "tqdm", "trange"]
