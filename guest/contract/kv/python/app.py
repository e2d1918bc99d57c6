"""The localkv.v1 contract, checked from a Python guest.

The same cases, in the same order and with the same names, as the Rust
guest beside it (../rust); ../README.md says what each case expects.
Prints `ok <case>` per passing case; on the first failure prints
`FAIL <case>: <why>` and exits with status 1.
"""

import time

from alk_store import InvalidArgument, InvalidName, PayloadTooLarge, ReservedName
from alk_store.kv import Bucket
from contract import Contract, ensure, raises
from wit_world import exports

MIB = 1024 * 1024


def outlive(ttl_ms):
    time.sleep((ttl_ms + 5) / 1000)


def keys(page):
    return [e.key for e in page.entries]


def contract():
    c = Contract()
    name = f"contract-py-{time.time_ns()}"
    b = Bucket.open(name)

    def open_returns_named_bucket():
        ensure(b.name == name)

    def get_absent_is_none():
        ensure(b.get("missing") is None)

    def set_then_get():
        b.set("a", b"1")
        ensure(b.get("a") == b"1")

    def set_overwrites_value():
        b.set("a", b"2")
        ensure(b.get("a") == b"2")

    def set_without_ttl_clears_ttl():
        b.set("ttl-cleared", b"x", ttl_ms=30)
        b.set("ttl-cleared", b"y")
        outlive(30)
        ensure(b.get("ttl-cleared") == b"y")

    def binary_and_empty_values_round_trip():
        everything = bytes(range(256))
        b.set("bin", everything)
        ensure(b.get("bin") == everything)
        b.set("empty", b"")
        ensure(b.get("empty") == b"")

    def unicode_keys_round_trip():
        b.set("ключ/日本/🔑", b"u")
        ensure(b.get("ключ/日本/🔑") == b"u")

    def set_if_absent_wins_on_absent_key():
        ensure(b.set_if_absent("once", b"first") is True)
        ensure(b.get("once") == b"first")

    def set_if_absent_loses_on_live_key():
        ensure(b.set_if_absent("once", b"second") is False)
        ensure(b.get("once") == b"first")

    def set_if_absent_loses_on_unexpired_ttl_key():
        b.set("lease", b"holder-1", ttl_ms=60_000)
        ensure(b.set_if_absent("lease", b"holder-2") is False)
        ensure(b.get("lease") == b"holder-1")

    def expired_key_reads_absent():
        # Only what holds however slow the machine is (see the Rust case).
        b.set("short", b"x", ttl_ms=20)
        outlive(20)
        ensure(b.get("short") is None)

    def exists_live_absent_expired():
        b.set("here", b"x")
        ensure(b.exists("here") is True)
        ensure(b.exists("not-here") is False)
        b.set("lasting", b"x", ttl_ms=600_000)
        ensure(b.exists("lasting") is True)
        b.set("fading", b"x", ttl_ms=20)
        outlive(20)
        ensure(b.exists("fading") is False)

    def set_if_absent_takes_over_expired_key():
        ensure(b.set_if_absent("takeover", b"old", ttl_ms=20) is True)
        outlive(20)
        ensure(b.set_if_absent("takeover", b"new") is True)
        ensure(b.get("takeover") == b"new")
        ensure(b.set_if_absent("takeover", b"newer") is False)

    def delete_removes_and_absent_delete_is_ok():
        b.set("gone", b"x")
        b.delete("gone")
        ensure(b.get("gone") is None)
        b.delete("gone")
        b.delete("never-existed")

    def set_many_then_get_many():
        b.set_many({k: k.encode() for k in ["m1", "m2", "m3"]})
        got = b.get_many(["m1", "m2", "missing", "m3"])
        ensure(got == [b"m1", b"m2", None, b"m3"], got)

    def set_many_is_all_or_nothing():
        raises(PayloadTooLarge, b.set_many, [("all-1", b"x"), ("all-2", b"\0" * (MIB + 1))])
        ensure(b.get("all-1") is None)
        raises(InvalidArgument, b.set_many, [(f"n{i}", b"") for i in range(1001)])
        ensure(b.get("n0") is None)

    def handles_share_the_bucket():
        again = Bucket.open(name)
        again.set("shared", b"s")
        ensure(b.get("shared") == b"s")

    def buckets_are_isolated():
        other = Bucket.open(f"{name}-other")
        ensure(other.get("a") is None)
        other.set("a", b"other")
        ensure(b.get("a") == b"2")

    s = Bucket.open(f"{name}-scan")

    def scan_prefix_orders_by_key_and_filters_prefix():
        for k in ["user:3", "user:1", "user:2", "usex", "user", "admin:1", "user:10"]:
            s.set(k, k.encode())
        page = s.scan_page("user:")
        ensure(keys(page) == ["user:1", "user:10", "user:2", "user:3"], keys(page))
        ensure(all(e.value == e.key.encode() for e in page.entries))
        ensure(page.next_cursor is None)

    def scan_empty_prefix_returns_every_key():
        page = s.scan_page("")
        ensure(len(page.entries) == 7, keys(page))
        ensure(keys(page)[0] == "admin:1")

    def scan_skips_expired_without_error():
        s.set("user:4", b"x", ttl_ms=20)
        outlive(20)
        page = s.scan_page("user:")
        ensure("user:4" not in keys(page))
        ensure(len(page.entries) == 4)

    def scan_pages_with_cursor():
        seen, pages = [], 0
        for page in s.pages("user:", limit=3):
            ensure(len(page.entries) <= 3)
            seen += keys(page)
            pages += 1
            ensure(pages < 10, "scan does not end")
        ensure(pages == 2, f"pages = {pages}")
        ensure(seen == ["user:1", "user:10", "user:2", "user:3"], seen)
        ensure([k for k, _ in s.scan("user:", limit=3)] == seen)

    def scan_limit_zero_is_clamped_to_one():
        page = s.scan_page("user:", limit=0)
        ensure(len(page.entries) == 1)
        ensure(page.next_cursor is not None)

    def scan_prefix_without_matches_is_empty():
        page = s.scan_page("zzz", limit=10)
        ensure(page.entries == [] and page.next_cursor is None)

    def scan_rejects_foreign_cursors():
        for bad in ["abc", "-1", "01", "", "1.5", "99999999999999999999999", "3"]:
            raises(InvalidArgument, s.scan_page, "user:", bad, limit=10)

    def scan_cursor_is_bound_to_its_prefix():
        cursor = s.scan_page("user:", limit=1).next_cursor
        ensure(cursor is not None)
        for other in ["u", "v"]:
            raises(InvalidArgument, s.scan_page, other, cursor, limit=10)

    def scan_pages_survive_concurrent_writes():
        for k in ["w1", "w2", "w3", "w4"]:
            s.set(k, k.encode())
        first = s.scan_page("w", limit=2)
        ensure(keys(first) == ["w1", "w2"] and first.next_cursor is not None, keys(first))
        s.delete("w1")
        s.set("w0", b"w0")
        s.set("w5", b"w5")
        second = s.scan_page("w", first.next_cursor, limit=2)
        ensure(keys(second) == ["w3", "w4"] and second.next_cursor is not None, keys(second))
        third = s.scan_page("w", second.next_cursor, limit=2)
        ensure(keys(third) == ["w5"] and third.next_cursor is None, keys(third))

    def empty_key_is_invalid_argument():
        raises(InvalidArgument, b.set, "", b"x")
        raises(InvalidArgument, b.get, "")

    def nul_in_key_is_invalid_argument():
        raises(InvalidArgument, b.set, "a\0b", b"x")

    def oversized_key_is_payload_too_large():
        e = raises(PayloadTooLarge, b.set, "k" * 1025, b"x")
        ensure(e.size == 1025 and e.limit == 1024, e)

    def oversized_value_is_payload_too_large_and_writes_nothing():
        value = b"\x07" * (MIB + 1)
        e = raises(PayloadTooLarge, b.set, "big", value)
        ensure(e.limit == MIB, e)
        raises(PayloadTooLarge, b.set_if_absent, "big", value)
        ensure(b.get("big") is None)
        b.set("big", value[:MIB])
        ensure(len(b.get("big")) == MIB)

    def zero_or_overflowing_ttl_is_invalid_argument():
        raises(InvalidArgument, b.set, "t", b"x", ttl_ms=0)
        raises(InvalidArgument, b.set, "t", b"x", ttl_ms=2**64 - 1)
        raises(InvalidArgument, b.set_if_absent, "t", b"x", ttl_ms=0)
        ensure(b.get("t") is None)

    def bad_bucket_names_are_invalid_name():
        for bad in ["", ".", "..", ".hidden", "a/b", "a\\b", "a\0b", "with space", "ü", "b" * 101]:
            raises(InvalidName, Bucket.open, bad)
        Bucket.open("b" * 100)

    def reserved_bucket_name_is_reserved_name():
        raises(ReservedName, Bucket.open, "__alkstore_internal")

    c.run([
        open_returns_named_bucket,
        get_absent_is_none,
        set_then_get,
        set_overwrites_value,
        set_without_ttl_clears_ttl,
        binary_and_empty_values_round_trip,
        unicode_keys_round_trip,
        set_if_absent_wins_on_absent_key,
        set_if_absent_loses_on_live_key,
        set_if_absent_loses_on_unexpired_ttl_key,
        expired_key_reads_absent,
        exists_live_absent_expired,
        set_if_absent_takes_over_expired_key,
        delete_removes_and_absent_delete_is_ok,
        set_many_then_get_many,
        set_many_is_all_or_nothing,
        handles_share_the_bucket,
        buckets_are_isolated,
        scan_prefix_orders_by_key_and_filters_prefix,
        scan_empty_prefix_returns_every_key,
        scan_skips_expired_without_error,
        scan_pages_with_cursor,
        scan_limit_zero_is_clamped_to_one,
        scan_prefix_without_matches_is_empty,
        scan_rejects_foreign_cursors,
        scan_cursor_is_bound_to_its_prefix,
        scan_pages_survive_concurrent_writes,
        empty_key_is_invalid_argument,
        nul_in_key_is_invalid_argument,
        oversized_key_is_payload_too_large,
        oversized_value_is_payload_too_large_and_writes_nothing,
        zero_or_overflowing_ttl_is_invalid_argument,
        bad_bucket_names_are_invalid_name,
        reserved_bucket_name_is_reserved_name,
    ])


class Run(exports.Run):
    def run(self) -> None:
        contract()
