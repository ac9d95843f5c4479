"""The threads channels send on, and what they may connect to: a small pool of their own,
name lookups pinned to the addresses checked, and the last HTTP answer kept.

Apprise's plugins are blocking code (requests, smtplib), so each send runs on one of
`POOL_THREADS` threads of this pool, never on the event loop's default executor, which
serves requests and `/up`. Its name lookups run there too, inside the send's timeout.

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
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..webhooks import RefusedAddress, refuse_non_public

T = TypeVar("T")
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Sends (and their lookups) that can run at once. A send waiting for a thread spends its
# own timeout waiting: whoever sends should run at most this many at once.
POOL_THREADS = 8

_system_getaddrinfo = socket.getaddrinfo
_local = threading.local()
_pool: ThreadPoolExecutor | None = None
_installing = threading.Lock()
_installed = False


def pool() -> ThreadPoolExecutor:
    """The sending threads (made on first use)."""
    global _pool
    if _pool is None:
        with _installing:
            if _pool is None:
                _pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="headway-notify")
    return _pool


async def run(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`function(*args, **kwargs)` on a sending thread."""
    call = functools.partial(function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(pool(), call)


async def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
    """The system's lookup of `host` for a stream socket, on a sending thread."""
    return await run(_system_getaddrinfo, host, port, type=socket.SOCK_STREAM)


def shutdown() -> None:
    """Let the sending threads go once their sends end (a later send makes new ones)."""
    global _pool
    found, _pool = _pool, None
    if found is not None:
        found.shutdown(wait=False, cancel_futures=True)


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


def install() -> None:
    """Put the wrappers of `socket.getaddrinfo` and `requests.Session.send` in place, once
    per process. Threads with no attempt see no difference."""
    global _installed
    if _installed:
        return
    with _installing:
        if _installed:
            return
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
        _installed = True


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
