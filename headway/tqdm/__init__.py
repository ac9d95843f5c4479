"""`from headway.tqdm import tqdm, trange`: tqdm's bars, also reported to Headway (see
`headway.client.tqdm` for what a bar reports and when its task finishes). Needs the
`tqdm` extra: `pip install 'headway[tqdm]'`."""

from __future__ import annotations

from typing import Any

try:
    from tqdm.std import tqdm as std_tqdm
except ModuleNotFoundError as exc:  # `pip install headway` alone has no tqdm
    raise ModuleNotFoundError(
        "headway.tqdm needs tqdm: pip install 'headway[tqdm]'", name=exc.name
    ) from exc

from ..client.tqdm import ReportingBar, attach


class tqdm(ReportingBar, std_tqdm):
    """`tqdm.tqdm`, taking also `client`, `space`, `task` and `min_interval`."""


def trange(*args: Any, **kwargs: Any) -> tqdm:
    """`tqdm(range(*args), **kwargs)`."""
    return tqdm(range(*args), **kwargs)


__all__ = ["attach", "tqdm", "trange"]
