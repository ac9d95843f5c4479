"""Whether an object implements a protocol: every member, each method with the protocol's
parameters and the same sync or async kind (as zope.interface's `verifyObject`)."""

from __future__ import annotations

import inspect
from typing import Any, Protocol


def members(protocol: type) -> set[str]:
    """The public names a protocol declares, its protocol bases' included."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        declared = {*vars(cls), *getattr(cls, "__annotations__", {})}
        names |= {name for name in declared if not name.startswith("_")}
    return names


def _parameters(function: Any) -> list[tuple[str, Any, Any]]:
    return [
        (parameter.name, parameter.kind, parameter.default)
        for parameter in inspect.signature(function).parameters.values()
    ]


def assert_implements(implementation: object, protocol: type) -> None:
    """Fail naming each member of `protocol` that `implementation` lacks or declares
    otherwise."""
    wrong = []
    for name in sorted(members(protocol)):
        if not hasattr(implementation, name):
            wrong.append(f"{name}: missing")
            continue
        declared = getattr(protocol, name, None)
        if not callable(declared):
            continue  # an attribute: being there is all a protocol says
        found = getattr(implementation, name)
        if inspect.iscoroutinefunction(declared) != inspect.iscoroutinefunction(found):
            wrong.append(f"{name}: async in one and not in the other")
        # The protocol's function takes `self`; the implementation's is bound.
        if _parameters(declared)[1:] != _parameters(found):
            wrong.append(f"{name}: parameters {inspect.signature(found)}")
    assert not wrong, f"{type(implementation).__name__} as a {protocol.__name__}: {wrong}"
