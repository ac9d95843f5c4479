"""The building block of every cache: held longest first, within its bounds, and a
generation that keeps a read a change overtook from being stored."""

from __future__ import annotations

from headway.caches.bounded import Bounded


def test_past_its_count_the_entry_held_longest_goes():
    held: Bounded[str, int] = Bounded(count=3)
    for n in range(5):
        held.put(f"k{n}", n)
    assert list(held) == ["k2", "k3", "k4"]


def test_past_its_bytes_an_eighth_is_freed_at_once_and_each_drop_is_heard():
    dropped: list[str] = []
    held: Bounded[str, bytes] = Bounded(
        max_bytes=80, size=len, keep=7 / 8, on_drop=lambda key, _: dropped.append(key)
    )
    for n in range(8):
        held.put(f"k{n}", b"x" * 10)
    assert held.bytes_held == 80 and dropped == []
    held.put("k8", b"x" * 10)
    assert held.bytes_held <= 70 and dropped == ["k0", "k1"]
    assert next(iter(held)) == "k2"


def test_a_touched_entry_goes_last():
    held: Bounded[str, int] = Bounded(count=2)
    held.put("a", 1)
    held.put("b", 2)
    assert held.touch("a") == 1
    held.put("c", 3)
    assert list(held) == ["a", "c"]


def test_a_read_overtaken_by_a_change_is_not_stored():
    held: Bounded[str, int] = Bounded()
    generation = held.generation
    held.forget("a")  # a change committed while the read ran
    assert held.put("a", 1, generation) is False and "a" not in held
    assert held.put("a", 1, held.generation) is True and held.get("a") == 1


def test_an_entry_that_grows_past_the_bound_pushes_out_the_oldest():
    sizes = {"a": 10, "b": 10}
    held: Bounded[str, str] = Bounded(max_bytes=25, size=lambda key: sizes[key])
    held.put("a", "a")
    held.put("b", "b")
    sizes["b"] = 20
    held.grew(10)
    assert list(held) == ["b"] and held.bytes_held == 20


def test_forget_where_lets_go_of_what_a_change_touched():
    held: Bounded[str, str] = Bounded()
    for key, space in (("a", "s1"), ("b", "s2"), ("c", "s1")):
        held.put(key, space)
    held.forget_where(lambda _, space: space == "s1")
    assert list(held) == ["b"]
