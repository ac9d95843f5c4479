"""The threads channels send on, how many sends each receiver host and each space may
have on them, and what they may connect to: a small pool of their own, name lookups
pinned to the addresses checked, and the last HTTP answer kept.

Apprise's plugins are blocking code (requests, smtplib), so each send runs on one of
`POOL_THREADS` threads of this pool, never on the event loop's default executor, which
serves requests and `/up`. Its name lookups run there too, inside the send's timeout.

A slow host holds up only its own channels:
- `admit` gives a send its place: at most `PER_HOST` sends in flight to one receiver host
  (`receiver_host`) and `PER_SPACE` for one space, in this process. A send refused a place
  is not started (nor counted as an attempt): its sender tries again at its next look.
- `run` waits for a free thread before it hands the call over, and the time a send waits
  there is not part of its timeout (`Budget`): a healthy send is never reported "no
  answer" because others hold the threads. A thread counts as busy until its call has
  really ended, even when the caller gave up on it earlier.
- `run`'s `wanted`, asked once a thread is free, drops a send whose channel or message
  went meanwhile (`Dropped`): what was queued for a deleted space never starts.

While a thread sends (`attempt`), `socket.getaddrinfo` is answered by a process-wide
wrapper, installed once, that reads the thread's attempt; a thread with no attempt (every
other thread) gets the system's answer as before. During an attempt:

- a name the check pinned gets the checked address and nothing else, whatever the name
  resolves to by now (DNS rebinding); TLS still checks the certificate against the name,
  since only the lookup changes;
- any other name (a hosted service's own host, a server a plugin discovers, an address
  written in the URL) is looked up there and then, and refused (`socket.gaierror`)
  unless every address it has is public (`webhooks.refuse_non_public`): the addresses checked
  are the ones connected to, so rebinding gains nothing there either. With
  `allow_private` nothing is refused or pinned.

Every plugin goes through `getaddrinfo` (urllib3 and smtplib both do), so every
connection a send makes is covered. `requests.Session.send` is wrapped the same way to
keep the status and `Retry-After` of the attempt's last HTTP answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import socket
import threading
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..delivery.webhooks import RefusedAddress, once, refuse_non_public

T = TypeVar("T")
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Sends (and their lookups) that can run at once; more wait for a thread, without
# spending their timeout (see `Budget`).
POOL_THREADS = 8
# Sends in flight at once, in this process, to one receiver host and for one space: fewer
# than the threads, so that one slow host or one space's many channels always leave some.
PER_HOST = 4
PER_SPACE = 4

_system_getaddrinfo = socket.getaddrinfo
_local = threading.local()
# Per event loop (one in a server process): the sends placed, by ("host" | "space", key),
# and the threads free for its calls. A loop that ends takes its counts with it.
_in_flight: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Counter[tuple[str, str]]] = (
    weakref.WeakKeyDictionary()
)
_free_threads: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


@once
def pool() -> ThreadPoolExecutor:
    """The sending threads (made on first use)."""
    return ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="headway-notify")


class Dropped(Exception):
    """A send's `wanted` said no once a thread was free: it was never started."""


class Budget:
    """A send's timeout, spent only while it runs: `run` stops it while the send waits for
    a thread. `async with Budget(10) as budget:` raises TimeoutError as `asyncio.timeout`
    does once the time is spent; `deadline` is when it ends on `time.monotonic()`, for
    the socket timeouts of the call on the thread (which no cancellation can stop)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.deadline = 0.0
        self._left = timeout_s
        self._timeout = asyncio.timeout(None)

    async def __aenter__(self) -> Budget:
        await self._timeout.__aenter__()
        self._resume()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._timeout.__aexit__(*exc_info)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """The time inside is not spent (unless the budget ran out already)."""
        if self._timeout.expired():
            yield
            return
        self._left = self.deadline - time.monotonic()
        self._timeout.reschedule(None)
        try:
            yield
        finally:
            self._resume()

    def _resume(self) -> None:
        self.deadline = time.monotonic() + self._left
        self._timeout.reschedule(asyncio.get_running_loop().time() + self._left)


async def run(
    function: Callable[..., T],
    *args: Any,
    budget: Budget | None = None,
    wanted: Callable[[], Awaitable[bool]] | None = None,
    **kwargs: Any,
) -> T:
    """`function(*args, **kwargs)` on a sending thread, once one is free. The wait is not
    part of `budget`; `wanted`, if given, is asked once a thread is free, and False
    drops the call (`Dropped`)."""
    loop = asyncio.get_running_loop()
    free = _free_threads.setdefault(loop, asyncio.Semaphore(POOL_THREADS))
    with budget.waiting() if budget is not None else contextlib.nullcontext():
        await free.acquire()
        try:
            if wanted is not None and not await wanted():
                raise Dropped
            future = pool().submit(functools.partial(function, *args, **kwargs))
        except BaseException:
            free.release()
            raise
    # The thread is free again only once the call has ended, not when its caller gave up.
    future.add_done_callback(functools.partial(_thread_ended, loop, free))
    return await asyncio.wrap_future(future)


def _thread_ended(loop: asyncio.AbstractEventLoop, free: asyncio.Semaphore, _: Future[Any]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
        loop.call_soon_threadsafe(free.release)


async def resolve(host: str, port: int, *, budget: Budget | None = None) -> list[tuple[Any, ...]]:
    """The system's lookup of `host` for a stream socket, on a sending thread."""
    return await run(_system_getaddrinfo, host, port, type=socket.SOCK_STREAM, budget=budget)


@dataclass(eq=False)
class Place:
    """One send's place among those in flight (see `admit`): `release` it once it ended."""

    keys: tuple[tuple[str, str], ...]
    counts: Counter[tuple[str, str]] = field(repr=False)
    held: bool = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.counts.subtract(self.keys)
            for key in self.keys:
                if self.counts[key] <= 0:
                    del self.counts[key]


def admit(space_uuid: str, host: str) -> Place | None:
    """A place for one send to `host` (see `receiver_host`) for the space, or None while
    that host has `PER_HOST` sends in flight in this process or the space `PER_SPACE`:
    the send is then not started, and its sender tries again later."""
    counts = _in_flight.setdefault(asyncio.get_running_loop(), Counter())
    keys = (("host", host), ("space", space_uuid))
    if counts[keys[0]] >= PER_HOST or counts[keys[1]] >= PER_SPACE:
        return None
    counts.update(keys)
    return Place(keys, counts)


def receiver_host(url: str) -> str:
    """The host a channel's URL sends to, as the bounds count it: the URL's host without
    its port (one machine, whatever port it listens on), or its scheme when it has none."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return url.partition(":")[0].lower()
    return normal_host(host) or parts.scheme.lower()


@dataclass
class Attempt:
    """One send on the current thread: what it may reach, and what it got."""

    pins: Mapping[str, Address]
    guarded: bool  # False with allow_private: nothing refused
    status: int | None = None  # the last HTTP answer's status
    retry_after: str | None = None  # and its Retry-After, as sent
    failure: str | None = None  # why the last HTTP request got no answer (no URL in it)
    refused: list[str] = field(default_factory=list)  # names refused, with the reason


@contextlib.contextmanager
def attempt(pins: Mapping[str, Address], *, guarded: bool) -> Iterator[Attempt]:
    """Run a send on this thread under `pins` (see the module's docstring)."""
    install()
    state = Attempt({normal_host(name): address for name, address in pins.items()}, guarded)
    _local.attempt = state
    try:
        yield state
    finally:
        _local.attempt = None


@once
def install() -> None:
    """Put the wrappers of `socket.getaddrinfo` and `requests.Session.send` in place, once
    per process. Threads with no attempt see no difference."""
    import requests

    socket.getaddrinfo = _getaddrinfo  # type: ignore[assignment]
    original_send = requests.Session.send

    @functools.wraps(original_send)
    def send(self: requests.Session, request: Any, **kwargs: Any) -> Any:
        state: Attempt | None = getattr(_local, "attempt", None)
        if state is None:
            return original_send(self, request, **kwargs)
        try:
            response = original_send(self, request, **kwargs)
        except Exception as exc:
            state.status, state.retry_after = None, None
            state.failure = _describe(exc, state)
            raise
        state.status = response.status_code
        state.retry_after = response.headers.get("retry-after")
        state.failure = None
        return response

    requests.Session.send = send  # type: ignore[method-assign]


def normal_host(host: str | bytes | None) -> str:
    """A host name as pins are keyed: lowercase ASCII (IDNA), no brackets or final dot."""
    if host is None:
        return ""
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    host = host.strip().strip("[]").rstrip(".").lower()
    if not host.isascii():
        with contextlib.suppress(UnicodeError):
            host = host.encode("idna").decode("ascii")
    return host


def _getaddrinfo(
    host: str | bytes | None,
    port: str | bytes | int | None,
    family: int = 0,
    type: int = 0,
    proto: int = 0,
    flags: int = 0,
) -> list[tuple[Any, ...]]:
    state: Attempt | None = getattr(_local, "attempt", None)
    if state is None or not state.guarded:
        return _system_getaddrinfo(host, port, family, type, proto, flags)
    name = normal_host(host)
    pinned = state.pins.get(name)
    if pinned is not None:
        return _system_getaddrinfo(
            str(pinned), port, family, type, proto, flags | socket.AI_NUMERICHOST
        )
    infos = _system_getaddrinfo(host, port, family, type, proto, flags)
    try:
        refuse_non_public(name, (ipaddress.ip_address(str(info[4][0])) for info in infos))
    except RefusedAddress as exc:
        state.refused.append(str(exc))
        raise socket.gaierror(socket.EAI_NONAME, f"refused: {exc}") from None
    return infos


def _describe(exc: Exception, state: Attempt) -> str:
    """Why a request got no answer, in words that hold no URL (requests' messages do)."""
    import requests

    if state.refused:
        return f"refused: {state.refused[-1]}"
    if isinstance(exc, requests.exceptions.SSLError):
        return "the TLS handshake failed (a certificate that does not match?)"
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return "connecting timed out"
    if isinstance(exc, requests.exceptions.Timeout):
        return "no answer in time"
    if isinstance(exc, requests.exceptions.ConnectionError):
        return "could not connect"
    return f"the request failed ({type(exc).__name__})"
