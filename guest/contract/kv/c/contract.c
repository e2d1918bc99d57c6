// The kv contract, checked from a C guest. See ../README.md.
//
// The same cases, in the same order and with the same names, as the Rust
// and Python guests beside it. Prints `ok <case>` per passing case and
// `N passed, 0 failed` at the end; on the first failure prints
// `FAIL <case>: <why>` and exits with status 1. Everything the bindings
// return (values, pages, error texts, handles) is freed or dropped.

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv_imports.h"

#define MIB (1024 * 1024)

typedef kv_imports_string_t str_t;
typedef kv_imports_list_u8_t bytes_t;
typedef alk_store_kv_own_bucket_t bucket_t;
typedef alk_store_kv_error_t kv_error_t;
typedef alk_store_kv_scan_page_t page_t;

// A string or byte literal, NULs included; `BYTES` is `len` bytes at `p`.
#define K(lit) ((str_t){(uint8_t *)(lit), sizeof(lit) - 1})
#define V(lit) BYTES((lit), sizeof(lit) - 1)
#define BYTES(p, len) ((bytes_t){(uint8_t *)(p), (len)})
// A list of keys, as the two arguments `want, n`.
#define KEYS(...) \
    (const char *const[]){__VA_ARGS__}, sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *)
// A TTL argument of `ms` milliseconds; NULL is no TTL.
#define TTL(ms) (&(uint64_t){(ms)})

static str_t str_n(const char *s, size_t len) {
    return (str_t){(uint8_t *)s, len};
}

static str_t str(const char *s) {
    return str_n(s, strlen(s));
}

// --- Outcomes ---------------------------------------------------------------

// The outcome of a call that succeeded; a failed call's outcome is its
// error's tag.
#define OK (-1)

static const char *const ERROR_NAMES[] = {
    "invalid-name", "reserved-name", "invalid-argument",
    "payload-too-large", "stale-receipt", "transaction-aborted",
    "busy", "store-setup", "internal",
};

static const char *outcome_name(int outcome) {
    if (outcome == OK) {
        return "ok";
    }
    if (outcome >= 0 && outcome < (int)(sizeof ERROR_NAMES / sizeof ERROR_NAMES[0])) {
        return ERROR_NAMES[outcome];
    }
    return "an unknown error";
}

// The last error: its tag, the sizes of `payload-too-large`, its text.
static struct {
    int tag;
    uint64_t size, limit;
    char text[256];
} last;

// The outcome of a call that returned `ok`; records and frees `err` when
// it failed.
static int outcome(bool ok, kv_error_t *err) {
    if (ok) {
        return OK;
    }
    last.tag = err->tag;
    last.size = last.limit = 0;
    const str_t *text = NULL;
    switch (err->tag) {
    case ALK_STORE_TYPES_ERROR_INVALID_NAME: text = &err->val.invalid_name; break;
    case ALK_STORE_TYPES_ERROR_RESERVED_NAME: text = &err->val.reserved_name; break;
    case ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT: text = &err->val.invalid_argument; break;
    case ALK_STORE_TYPES_ERROR_STALE_RECEIPT: text = &err->val.stale_receipt; break;
    case ALK_STORE_TYPES_ERROR_TRANSACTION_ABORTED: text = &err->val.transaction_aborted; break;
    case ALK_STORE_TYPES_ERROR_BUSY: text = &err->val.busy; break;
    case ALK_STORE_TYPES_ERROR_STORE_SETUP: text = &err->val.store_setup.message; break;
    case ALK_STORE_TYPES_ERROR_INTERNAL: text = &err->val.internal; break;
    case ALK_STORE_TYPES_ERROR_PAYLOAD_TOO_LARGE:
        last.size = err->val.payload_too_large.size;
        last.limit = err->val.payload_too_large.limit;
        break;
    }
    if (text != NULL) {
        snprintf(last.text, sizeof last.text, "%.*s", (int)text->len, (const char *)text->ptr);
    } else {
        snprintf(last.text, sizeof last.text, "size %llu, limit %llu",
                 (unsigned long long)last.size, (unsigned long long)last.limit);
    }
    alk_store_kv_error_free(err);
    return last.tag;
}

// --- Cases ------------------------------------------------------------------

// Why the running case failed.
static char why[2048];

#define FAIL(...)                                   \
    do {                                            \
        snprintf(why, sizeof why, __VA_ARGS__);     \
        return false;                               \
    } while (0)

// Fails the case with the condition's text unless it holds.
#define ENSURE(cond)                                                  \
    do {                                                              \
        if (!(cond)) {                                                \
            FAIL("ensure(%s) failed at line %d", #cond, __LINE__);    \
        }                                                             \
    } while (0)

// Fails the case unless the call (returning an outcome) gives `want`.
#define EXPECT(call, want) EXPECT_AS((call), (want), #call)
#define CHECK(call) EXPECT_AS((call), OK, #call)
#define EXPECT_AS(call, want, what)                                           \
    do {                                                                      \
        int got_ = (call);                                                    \
        if (got_ != (want)) {                                                 \
            FAIL("%s = %s%s%s, expected %s (line %d)", what,                  \
                 outcome_name(got_), got_ == OK ? "" : ": ",                  \
                 got_ == OK ? "" : last.text, outcome_name(want), __LINE__);  \
        }                                                                     \
    } while (0)

// Fails the case unless `key` of bucket `b` holds `want` (NULL: absent).
#define EXPECT_VALUE(b, key, want) EXPECT_VALUE_AS((b), (key), (want), #key)
#define EXPECT_NONE(b, key) EXPECT_VALUE_AS((b), (key), NULL, #key)
#define EXPECT_VALUE_AS(b, key, want, what)                  \
    do {                                                     \
        if (!value_is((b), (key), (want), what, __LINE__)) { \
            return false;                                    \
        }                                                    \
    } while (0)

// --- The interface, call by call ---------------------------------------------

static alk_store_kv_borrow_bucket_t borrow(bucket_t b) {
    return alk_store_kv_borrow_bucket(b);
}

static int kv_open(str_t name, bucket_t *out) {
    kv_error_t err;
    return outcome(alk_store_kv_static_bucket_open(&name, out, &err), &err);
}

static int kv_get(bucket_t b, str_t key, kv_imports_option_list_u8_t *out) {
    kv_error_t err;
    return outcome(alk_store_kv_method_bucket_get(borrow(b), &key, out, &err), &err);
}

static int kv_set(bucket_t b, str_t key, bytes_t value, const uint64_t *ttl_ms) {
    kv_error_t err;
    uint64_t ttl = ttl_ms ? *ttl_ms : 0;
    return outcome(alk_store_kv_method_bucket_set(borrow(b), &key, &value, ttl_ms ? &ttl : NULL, &err),
                   &err);
}

static int kv_set_if_absent(bucket_t b, str_t key, bytes_t value, const uint64_t *ttl_ms, bool *won) {
    kv_error_t err;
    uint64_t ttl = ttl_ms ? *ttl_ms : 0;
    return outcome(alk_store_kv_method_bucket_set_if_absent(borrow(b), &key, &value,
                                                            ttl_ms ? &ttl : NULL, won, &err),
                   &err);
}

static int kv_exists(bucket_t b, str_t key, bool *out) {
    kv_error_t err;
    return outcome(alk_store_kv_method_bucket_exists(borrow(b), &key, out, &err), &err);
}

static int kv_delete(bucket_t b, str_t key) {
    kv_error_t err;
    return outcome(alk_store_kv_method_bucket_delete(borrow(b), &key, &err), &err);
}

static int kv_set_many(bucket_t b, alk_store_kv_entry_t *entries, size_t n, const uint64_t *ttl_ms) {
    kv_error_t err;
    alk_store_kv_list_entry_t list = {entries, n};
    uint64_t ttl = ttl_ms ? *ttl_ms : 0;
    return outcome(alk_store_kv_method_bucket_set_many(borrow(b), &list, ttl_ms ? &ttl : NULL, &err),
                   &err);
}

static int kv_get_many(bucket_t b, str_t *keys, size_t n, kv_imports_list_option_list_u8_t *out) {
    kv_error_t err;
    kv_imports_list_string_t list = {keys, n};
    return outcome(alk_store_kv_method_bucket_get_many(borrow(b), &list, out, &err), &err);
}

// A page of `prefix` from `cursor` (NULL: from the start); the caller
// frees it with `alk_store_kv_scan_page_free`.
static int kv_scan(bucket_t b, str_t prefix, const str_t *cursor, uint32_t limit, page_t *out) {
    kv_error_t err;
    str_t c = cursor ? *cursor : str("");
    return outcome(alk_store_kv_method_bucket_scan_prefix(borrow(b), &prefix, cursor ? &c : NULL,
                                                          limit, out, &err),
                   &err);
}

static void drop(bucket_t b) {
    alk_store_kv_bucket_drop_own(b);
}

// --- Checks -------------------------------------------------------------------

// `v` in words, for messages: `none`, the text, or its length.
static void describe(const kv_imports_option_list_u8_t *v, char *out, size_t size) {
    if (!v->is_some) {
        snprintf(out, size, "none");
        return;
    }
    bool printable = v->val.len <= 64;
    for (size_t i = 0; printable && i < v->val.len; i++) {
        printable = v->val.ptr[i] >= 0x20 && v->val.ptr[i] < 0x7f;
    }
    if (printable) {
        snprintf(out, size, "\"%.*s\"", (int)v->val.len, (const char *)v->val.ptr);
    } else {
        snprintf(out, size, "%zu bytes", v->val.len);
    }
}

static bool same(const bytes_t *a, const bytes_t *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

// Whether `key` holds `want` (NULL: is absent); says what it holds when not.
static bool value_is(bucket_t b, str_t key, const bytes_t *want, const char *what, int line) {
    kv_imports_option_list_u8_t got;
    int r = kv_get(b, key, &got);
    if (r != OK) {
        FAIL("get(%s) = %s: %s (line %d)", what, outcome_name(r), last.text, line);
    }
    bool ok = want == NULL ? !got.is_some : got.is_some && same(&got.val, want);
    char seen[96];
    describe(&got, seen, sizeof seen);
    kv_imports_option_list_u8_free(&got);
    if (!ok) {
        FAIL("get(%s) = %s, expected %s (line %d)", what, seen,
             want == NULL ? "none" : "the value set", line);
    }
    return true;
}

// Whether the page's keys are exactly `want`; lists them when not.
static bool keys_are(const page_t *page, const char *const *want, size_t n, int line) {
    bool ok = page->entries.len == n;
    for (size_t i = 0; ok && i < n; i++) {
        const str_t *k = &page->entries.ptr[i].key;
        ok = k->len == strlen(want[i]) && memcmp(k->ptr, want[i], k->len) == 0;
    }
    if (!ok) {
        char got[512] = "", wanted[512] = "";
        size_t used = 0;
        for (size_t i = 0; i < page->entries.len && used < sizeof got; i++) {
            const str_t *k = &page->entries.ptr[i].key;
            used += snprintf(got + used, sizeof got - used, "%s%.*s", i ? ", " : "", (int)k->len,
                             (const char *)k->ptr);
        }
        used = 0;
        for (size_t i = 0; i < n && used < sizeof wanted; i++) {
            used += snprintf(wanted + used, sizeof wanted - used, "%s%s", i ? ", " : "", want[i]);
        }
        FAIL("the page's keys are [%s], expected [%s] (line %d)", got, wanted, line);
    }
    return true;
}

static bool has_key(const page_t *page, const char *key) {
    for (size_t i = 0; i < page->entries.len; i++) {
        const str_t *k = &page->entries.ptr[i].key;
        if (k->len == strlen(key) && memcmp(k->ptr, key, k->len) == 0) {
            return true;
        }
    }
    return false;
}

// Moves the page's cursor, if any, into `cursor` (the caller frees it
// with `kv_imports_string_free`); whether there was one.
static bool take_cursor(page_t *page, str_t *cursor) {
    if (!page->next_cursor.is_some) {
        return false;
    }
    *cursor = page->next_cursor.val;
    page->next_cursor.is_some = false;
    return true;
}

// Scans one page and checks that its keys are `want`; moves its cursor
// into `next` as `take_cursor` does (not when it fails).
static bool page_is(bucket_t w, str_t prefix, const str_t *cursor, uint32_t limit,
                    const char *const *want, size_t n, str_t *next, bool *more, int line) {
    page_t page;
    int r = kv_scan(w, prefix, cursor, limit, &page);
    if (r != OK) {
        FAIL("scan of \"%.*s\" = %s: %s (line %d)", (int)prefix.len, (const char *)prefix.ptr,
             outcome_name(r), last.text, line);
    }
    bool ok = keys_are(&page, want, n, line);
    *more = ok && take_cursor(&page, next);
    alk_store_kv_scan_page_free(&page);
    return ok;
}

// Waits until a key set now with `ttl_ms` has expired by the host's clock.
static void outlive(uint64_t ttl_ms) {
    uint64_t ns = (ttl_ms + 5) * 1000000ull;
    struct timespec t = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    nanosleep(&t, NULL);
}

// --- The contract ------------------------------------------------------------

static char name[64];
static bucket_t b;  // the contract bucket
static bucket_t s;  // a bucket of its own for scans, so expected sets are exact

static bool open_returns_named_bucket(void) {
    str_t got;
    alk_store_kv_method_bucket_name(borrow(b), &got);
    bool ok = got.len == strlen(name) && memcmp(got.ptr, name, got.len) == 0;
    kv_imports_string_free(&got);
    ENSURE(ok);
    return true;
}

static bool get_absent_is_none(void) {
    EXPECT_NONE(b, K("missing"));
    return true;
}

static bool set_then_get(void) {
    CHECK(kv_set(b, K("a"), V("1"), NULL));
    EXPECT_VALUE(b, K("a"), &V("1"));
    return true;
}

static bool set_overwrites_value(void) {
    CHECK(kv_set(b, K("a"), V("2"), NULL));
    EXPECT_VALUE(b, K("a"), &V("2"));
    return true;
}

static bool set_without_ttl_clears_ttl(void) {
    CHECK(kv_set(b, K("ttl-cleared"), V("x"), TTL(30)));
    CHECK(kv_set(b, K("ttl-cleared"), V("y"), NULL));
    outlive(30);
    EXPECT_VALUE(b, K("ttl-cleared"), &V("y"));
    return true;
}

static bool binary_and_empty_values_round_trip(void) {
    uint8_t all[256];
    for (int i = 0; i < 256; i++) {
        all[i] = (uint8_t)i;
    }
    CHECK(kv_set(b, K("bin"), BYTES(all, sizeof all), NULL));
    EXPECT_VALUE(b, K("bin"), &BYTES(all, sizeof all));
    CHECK(kv_set(b, K("empty"), V(""), NULL));
    EXPECT_VALUE(b, K("empty"), &V(""));
    return true;
}

static bool unicode_keys_round_trip(void) {
    CHECK(kv_set(b, K("ключ/日本/🔑"), V("u"), NULL));
    EXPECT_VALUE(b, K("ключ/日本/🔑"), &V("u"));
    return true;
}

static bool set_if_absent_wins_on_absent_key(void) {
    bool won = false;
    CHECK(kv_set_if_absent(b, K("once"), V("first"), NULL, &won));
    ENSURE(won);
    EXPECT_VALUE(b, K("once"), &V("first"));
    return true;
}

static bool set_if_absent_loses_on_live_key(void) {
    bool won = true;
    CHECK(kv_set_if_absent(b, K("once"), V("second"), NULL, &won));
    ENSURE(!won);
    EXPECT_VALUE(b, K("once"), &V("first"));
    return true;
}

static bool set_if_absent_loses_on_unexpired_ttl_key(void) {
    bool won = true;
    CHECK(kv_set(b, K("lease"), V("holder-1"), TTL(60000)));
    CHECK(kv_set_if_absent(b, K("lease"), V("holder-2"), NULL, &won));
    ENSURE(!won);
    EXPECT_VALUE(b, K("lease"), &V("holder-1"));
    return true;
}

static bool expired_key_reads_absent(void) {
    // Only what holds however slow the machine is (see the Rust case).
    CHECK(kv_set(b, K("short"), V("x"), TTL(20)));
    outlive(20);
    EXPECT_NONE(b, K("short"));
    return true;
}

static bool exists_live_absent_expired(void) {
    bool there = false;
    CHECK(kv_set(b, K("here"), V("x"), NULL));
    CHECK(kv_exists(b, K("here"), &there));
    ENSURE(there);
    CHECK(kv_exists(b, K("not-here"), &there));
    ENSURE(!there);
    CHECK(kv_set(b, K("lasting"), V("x"), TTL(600000)));
    CHECK(kv_exists(b, K("lasting"), &there));
    ENSURE(there);
    CHECK(kv_set(b, K("fading"), V("x"), TTL(20)));
    outlive(20);
    CHECK(kv_exists(b, K("fading"), &there));
    ENSURE(!there);
    return true;
}

static bool set_if_absent_takes_over_expired_key(void) {
    bool won = false;
    CHECK(kv_set_if_absent(b, K("takeover"), V("old"), TTL(20), &won));
    ENSURE(won);
    outlive(20);
    won = false;
    CHECK(kv_set_if_absent(b, K("takeover"), V("new"), NULL, &won));
    ENSURE(won);
    EXPECT_VALUE(b, K("takeover"), &V("new"));
    // The new value has no TTL: it stays.
    CHECK(kv_set_if_absent(b, K("takeover"), V("newer"), NULL, &won));
    ENSURE(!won);
    return true;
}

static bool delete_removes_and_absent_delete_is_ok(void) {
    CHECK(kv_set(b, K("gone"), V("x"), NULL));
    CHECK(kv_delete(b, K("gone")));
    EXPECT_NONE(b, K("gone"));
    CHECK(kv_delete(b, K("gone")));
    CHECK(kv_delete(b, K("never-existed")));
    return true;
}

static bool set_many_then_get_many(void) {
    alk_store_kv_entry_t entries[] = {
        {K("m1"), V("m1")},
        {K("m2"), V("m2")},
        {K("m3"), V("m3")},
    };
    CHECK(kv_set_many(b, entries, 3, NULL));
    str_t keys[] = {K("m1"), K("m2"), K("missing"), K("m3")};
    kv_imports_list_option_list_u8_t got;
    CHECK(kv_get_many(b, keys, 4, &got));
    bool ok = got.len == 4 && got.ptr[0].is_some && same(&got.ptr[0].val, &V("m1")) &&
              got.ptr[1].is_some && same(&got.ptr[1].val, &V("m2")) && !got.ptr[2].is_some &&
              got.ptr[3].is_some && same(&got.ptr[3].val, &V("m3"));
    size_t n = got.len;
    kv_imports_list_option_list_u8_free(&got);
    if (!ok) {
        FAIL("get-many returned %zu values, expected m1, m2, none, m3", n);
    }
    return true;
}

static bool set_many_is_all_or_nothing(void) {
    uint8_t *big = calloc(MIB + 1, 1);
    ENSURE(big != NULL);
    alk_store_kv_entry_t entries[] = {
        {K("all-1"), V("x")},
        {K("all-2"), BYTES(big, MIB + 1)},
    };
    int r = kv_set_many(b, entries, 2, NULL);
    free(big);
    EXPECT(r, ALK_STORE_TYPES_ERROR_PAYLOAD_TOO_LARGE);
    EXPECT_NONE(b, K("all-1"));

    static char keys[1001][8];
    static alk_store_kv_entry_t too_many[1001];
    for (int i = 0; i < 1001; i++) {
        snprintf(keys[i], sizeof keys[i], "n%d", i);
        too_many[i] = (alk_store_kv_entry_t){str(keys[i]), V("")};
    }
    EXPECT(kv_set_many(b, too_many, 1001, NULL), ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT);
    EXPECT_NONE(b, K("n0"));
    return true;
}

static bool handles_share_the_bucket(void) {
    bucket_t again;
    CHECK(kv_open(str(name), &again));
    int r = kv_set(again, K("shared"), V("s"), NULL);
    drop(again);
    CHECK(r);
    EXPECT_VALUE(b, K("shared"), &V("s"));
    return true;
}

static bool buckets_are_isolated_in(bucket_t other) {
    EXPECT_NONE(other, K("a"));
    CHECK(kv_set(other, K("a"), V("other"), NULL));
    EXPECT_VALUE(b, K("a"), &V("2"));
    return true;
}

static bool buckets_are_isolated(void) {
    char other_name[80];
    snprintf(other_name, sizeof other_name, "%s-other", name);
    bucket_t other;
    CHECK(kv_open(str(other_name), &other));
    bool ok = buckets_are_isolated_in(other);
    drop(other);
    return ok;
}

static bool scan_prefix_orders_by_key_and_filters_prefix(void) {
    const char *keys[] = {"user:3", "user:1", "user:2", "usex", "user", "admin:1", "user:10"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        CHECK(kv_set(s, str(keys[i]), BYTES(keys[i], strlen(keys[i])), NULL));
    }
    page_t page;
    CHECK(kv_scan(s, K("user:"), NULL, 100, &page));
    bool ok = keys_are(&page, KEYS("user:1", "user:10", "user:2", "user:3"), __LINE__);
    bool values = true;
    for (size_t i = 0; i < page.entries.len; i++) {
        const alk_store_kv_entry_t *e = &page.entries.ptr[i];
        values = values && e->value.len == e->key.len &&
                 memcmp(e->value.ptr, e->key.ptr, e->key.len) == 0;
    }
    bool done = !page.next_cursor.is_some;
    alk_store_kv_scan_page_free(&page);
    if (!ok) {
        return false;
    }
    ENSURE(values);
    ENSURE(done);
    return true;
}

static bool scan_empty_prefix_returns_every_key(void) {
    page_t page;
    CHECK(kv_scan(s, K(""), NULL, 100, &page));
    size_t n = page.entries.len;
    bool first = n > 0 && page.entries.ptr[0].key.len == 7 &&
                 memcmp(page.entries.ptr[0].key.ptr, "admin:1", 7) == 0;
    alk_store_kv_scan_page_free(&page);
    if (n != 7) {
        FAIL("%zu entries, expected 7", n);
    }
    ENSURE(first);
    return true;
}

static bool scan_skips_expired_without_error(void) {
    CHECK(kv_set(s, K("user:4"), V("x"), TTL(20)));
    outlive(20);
    page_t page;
    CHECK(kv_scan(s, K("user:"), NULL, 100, &page));
    bool skipped = !has_key(&page, "user:4");
    size_t n = page.entries.len;
    alk_store_kv_scan_page_free(&page);
    ENSURE(skipped);
    ENSURE(n == 4);
    return true;
}

static bool scan_pages_with_cursor(void) {
    const char *want[] = {"user:1", "user:10", "user:2", "user:3"};
    size_t seen = 0;
    int pages = 0;
    str_t cursor;
    bool more = false;
    do {
        page_t page;
        int r = kv_scan(s, K("user:"), more ? &cursor : NULL, 3, &page);
        if (more) {
            kv_imports_string_free(&cursor);
        }
        CHECK(r);
        pages++;
        bool ok = page.entries.len <= 3;
        for (size_t i = 0; ok && i < page.entries.len; i++, seen++) {
            const str_t *k = &page.entries.ptr[i].key;
            ok = seen < 4 && k->len == strlen(want[seen]) && memcmp(k->ptr, want[seen], k->len) == 0;
        }
        more = take_cursor(&page, &cursor);
        alk_store_kv_scan_page_free(&page);
        if (!ok || pages >= 10) {
            if (more) {
                kv_imports_string_free(&cursor);
            }
            FAIL("page %d: more than 3 entries, a key out of order or twice, or no end", pages);
        }
    } while (more);
    if (pages != 2) {
        FAIL("pages = %d", pages);
    }
    ENSURE(seen == 4);
    return true;
}

static bool scan_limit_zero_is_clamped_to_one(void) {
    page_t page;
    CHECK(kv_scan(s, K("user:"), NULL, 0, &page));
    size_t n = page.entries.len;
    bool more = page.next_cursor.is_some;
    alk_store_kv_scan_page_free(&page);
    ENSURE(n == 1);
    ENSURE(more);
    return true;
}

static bool scan_prefix_without_matches_is_empty(void) {
    page_t page;
    CHECK(kv_scan(s, K("zzz"), NULL, 10, &page));
    bool empty = page.entries.len == 0 && !page.next_cursor.is_some;
    alk_store_kv_scan_page_free(&page);
    ENSURE(empty);
    return true;
}

// The outcome of a scan of `prefix` from `cursor`; frees the page.
static int scan_outcome(str_t prefix, const str_t *cursor) {
    page_t page;
    int r = kv_scan(s, prefix, cursor, 10, &page);
    if (r == OK) {
        alk_store_kv_scan_page_free(&page);
    }
    return r;
}

static bool scan_rejects_foreign_cursors(void) {
    const char *bad[] = {"abc", "-1", "01", "", "1.5", "99999999999999999999999", "3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = scan_outcome(K("user:"), &(str_t){(uint8_t *)bad[i], strlen(bad[i])});
        if (r != ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT) {
            FAIL("a scan from cursor \"%s\" = %s, expected invalid-argument", bad[i], outcome_name(r));
        }
    }
    return true;
}

static bool scan_cursor_is_bound_to_its_prefix(void) {
    str_t cursor;
    bool more;
    if (!page_is(s, K("user:"), NULL, 1, KEYS("user:1"), &cursor, &more, __LINE__)) {
        return false;
    }
    if (!more) {
        FAIL("no cursor after the first of several entries");
    }
    int with_u = scan_outcome(K("u"), &cursor);
    int with_v = scan_outcome(K("v"), &cursor);
    kv_imports_string_free(&cursor);
    EXPECT(with_u, ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT);
    EXPECT(with_v, ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT);
    return true;
}

// Changes `w` around a cursor that stands after `w2`.
static bool write_around_the_cursor(bucket_t w) {
    CHECK(kv_delete(w, K("w1")));
    CHECK(kv_set(w, K("w0"), V("w0"), NULL));
    CHECK(kv_set(w, K("w5"), V("w5"), NULL));
    return true;
}

static bool pages_survive_writes_in(bucket_t w) {
    alk_store_kv_entry_t entries[] = {
        {K("w1"), V("w1")},
        {K("w2"), V("w2")},
        {K("w3"), V("w3")},
        {K("w4"), V("w4")},
    };
    CHECK(kv_set_many(w, entries, 4, NULL));
    str_t first, second, third;
    bool more;
    if (!page_is(w, K("w"), NULL, 2, KEYS("w1", "w2"), &first, &more, __LINE__)) {
        return false;
    }
    if (!more) {
        FAIL("no cursor after the first page");
    }
    bool ok = write_around_the_cursor(w) &&
              page_is(w, K("w"), &first, 2, KEYS("w3", "w4"), &second, &more, __LINE__);
    kv_imports_string_free(&first);
    if (!ok) {
        return false;
    }
    if (!more) {
        FAIL("no cursor after the second page");
    }
    ok = page_is(w, K("w"), &second, 2, KEYS("w5"), &third, &more, __LINE__);
    kv_imports_string_free(&second);
    if (!ok) {
        return false;
    }
    if (more) {
        kv_imports_string_free(&third);
        FAIL("a cursor after the last page");
    }
    return true;
}

static bool scan_pages_survive_concurrent_writes(void) {
    char writes[80];
    snprintf(writes, sizeof writes, "%s-writes", name);
    bucket_t w;
    CHECK(kv_open(str(writes), &w));
    bool ok = pages_survive_writes_in(w);
    drop(w);
    return ok;
}

static bool empty_key_is_invalid_argument(void) {
    kv_imports_option_list_u8_t v;
    EXPECT(kv_set(b, K(""), V("x"), NULL), ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT);
    int r = kv_get(b, K(""), &v);
    if (r == OK) {
        kv_imports_option_list_u8_free(&v);
    }
    EXPECT(r, ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT);
    return true;
}

static bool nul_in_key_is_invalid_argument(void) {
    EXPECT(kv_set(b, K("a\0b"), V("x"), NULL), ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT);
    return true;
}

static bool oversized_key_is_payload_too_large(void) {
    char key[1025];
    memset(key, 'k', sizeof key);
    EXPECT(kv_set(b, str_n(key, sizeof key), V("x"), NULL), ALK_STORE_TYPES_ERROR_PAYLOAD_TOO_LARGE);
    if (last.size != 1025 || last.limit != 1024) {
        FAIL("payload-too-large with %s, expected size 1025, limit 1024", last.text);
    }
    return true;
}

static bool oversized_value_is_payload_too_large_in(uint8_t *value) {
    EXPECT(kv_set(b, K("big"), BYTES(value, MIB + 1), NULL),
           ALK_STORE_TYPES_ERROR_PAYLOAD_TOO_LARGE);
    if (last.limit != MIB) {
        FAIL("payload-too-large with %s, expected limit %d", last.text, MIB);
    }
    bool won;
    EXPECT(kv_set_if_absent(b, K("big"), BYTES(value, MIB + 1), NULL, &won),
           ALK_STORE_TYPES_ERROR_PAYLOAD_TOO_LARGE);
    EXPECT_NONE(b, K("big"));
    // The largest allowed value is stored.
    CHECK(kv_set(b, K("big"), BYTES(value, MIB), NULL));
    EXPECT_VALUE(b, K("big"), &BYTES(value, MIB));
    return true;
}

static bool oversized_value_is_payload_too_large_and_writes_nothing(void) {
    uint8_t *value = malloc(MIB + 1);
    ENSURE(value != NULL);
    memset(value, 7, MIB + 1);
    bool ok = oversized_value_is_payload_too_large_in(value);
    free(value);
    return ok;
}

static bool zero_or_overflowing_ttl_is_invalid_argument(void) {
    bool won;
    EXPECT(kv_set(b, K("t"), V("x"), TTL(0)), ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT);
    EXPECT(kv_set(b, K("t"), V("x"), TTL(UINT64_MAX)), ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT);
    EXPECT(kv_set_if_absent(b, K("t"), V("x"), TTL(0), &won), ALK_STORE_TYPES_ERROR_INVALID_ARGUMENT);
    EXPECT_NONE(b, K("t"));
    return true;
}

static bool bad_bucket_names_are_invalid_name(void) {
    char long_name[101];
    memset(long_name, 'b', sizeof long_name);
    const str_t bad[] = {
        K(""), K("."), K(".."), K(".hidden"), K("a/b"), K("a\\b"), K("a\0b"),
        K("with space"), K("ü"), str_n(long_name, 101),
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bucket_t opened;
        int r = kv_open(bad[i], &opened);
        if (r == OK) {
            drop(opened);
        }
        if (r != ALK_STORE_TYPES_ERROR_INVALID_NAME) {
            FAIL("open of bad name %zu (\"%.*s\") = %s, expected invalid-name", i,
                 (int)bad[i].len, (const char *)bad[i].ptr, outcome_name(r));
        }
    }
    bucket_t fine;
    CHECK(kv_open(str_n(long_name, 100), &fine));
    drop(fine);
    return true;
}

static bool reserved_bucket_name_is_reserved_name(void) {
    bucket_t opened;
    int r = kv_open(K("__alkstore_internal"), &opened);
    if (r == OK) {
        drop(opened);
    }
    EXPECT(r, ALK_STORE_TYPES_ERROR_RESERVED_NAME);
    return true;
}

static const struct {
    const char *name;
    bool (*run)(void);
} CASES[] = {
    {"open-returns-named-bucket", open_returns_named_bucket},
    {"get-absent-is-none", get_absent_is_none},
    {"set-then-get", set_then_get},
    {"set-overwrites-value", set_overwrites_value},
    {"set-without-ttl-clears-ttl", set_without_ttl_clears_ttl},
    {"binary-and-empty-values-round-trip", binary_and_empty_values_round_trip},
    {"unicode-keys-round-trip", unicode_keys_round_trip},
    {"set-if-absent-wins-on-absent-key", set_if_absent_wins_on_absent_key},
    {"set-if-absent-loses-on-live-key", set_if_absent_loses_on_live_key},
    {"set-if-absent-loses-on-unexpired-ttl-key", set_if_absent_loses_on_unexpired_ttl_key},
    {"expired-key-reads-absent", expired_key_reads_absent},
    {"exists-live-absent-expired", exists_live_absent_expired},
    {"set-if-absent-takes-over-expired-key", set_if_absent_takes_over_expired_key},
    {"delete-removes-and-absent-delete-is-ok", delete_removes_and_absent_delete_is_ok},
    {"set-many-then-get-many", set_many_then_get_many},
    {"set-many-is-all-or-nothing", set_many_is_all_or_nothing},
    {"handles-share-the-bucket", handles_share_the_bucket},
    {"buckets-are-isolated", buckets_are_isolated},
    {"scan-prefix-orders-by-key-and-filters-prefix", scan_prefix_orders_by_key_and_filters_prefix},
    {"scan-empty-prefix-returns-every-key", scan_empty_prefix_returns_every_key},
    {"scan-skips-expired-without-error", scan_skips_expired_without_error},
    {"scan-pages-with-cursor", scan_pages_with_cursor},
    {"scan-limit-zero-is-clamped-to-one", scan_limit_zero_is_clamped_to_one},
    {"scan-prefix-without-matches-is-empty", scan_prefix_without_matches_is_empty},
    {"scan-rejects-foreign-cursors", scan_rejects_foreign_cursors},
    {"scan-cursor-is-bound-to-its-prefix", scan_cursor_is_bound_to_its_prefix},
    {"scan-pages-survive-concurrent-writes", scan_pages_survive_concurrent_writes},
    {"empty-key-is-invalid-argument", empty_key_is_invalid_argument},
    {"nul-in-key-is-invalid-argument", nul_in_key_is_invalid_argument},
    {"oversized-key-is-payload-too-large", oversized_key_is_payload_too_large},
    {"oversized-value-is-payload-too-large-and-writes-nothing",
     oversized_value_is_payload_too_large_and_writes_nothing},
    {"zero-or-overflowing-ttl-is-invalid-argument", zero_or_overflowing_ttl_is_invalid_argument},
    {"bad-bucket-names-are-invalid-name", bad_bucket_names_are_invalid_name},
    {"reserved-bucket-name-is-reserved-name", reserved_bucket_name_is_reserved_name},
};

int main(void) {
    // Buckets of their own, so runs on a shared data directory never meet.
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(name, sizeof name, "contract-c-%lld%09ld", (long long)now.tv_sec, (long)now.tv_nsec);
    char scan_name[80];
    snprintf(scan_name, sizeof scan_name, "%s-scan", name);
    if (kv_open(str(name), &b) != OK || kv_open(str(scan_name), &s) != OK) {
        fprintf(stderr, "cannot open the contract buckets: %s: %s\n", outcome_name(last.tag), last.text);
        return 1;
    }

    int passed = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        if (!CASES[i].run()) {
            printf("FAIL %s: %s\n", CASES[i].name, why);
            return 1;
        }
        passed++;
        printf("ok %s\n", CASES[i].name);
    }
    printf("%d passed, 0 failed\n", passed);
    drop(s);
    drop(b);
    return 0;
}
