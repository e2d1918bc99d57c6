// A small app that remembers: a visit counter and a guest book kept in an
// alk bucket, so every run sees what earlier runs (and other processes)
// wrote. The C twin of guest/hello.
//
// Usage: hello [NAME]

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv_imports.h"

typedef kv_imports_string_t str_t;

static str_t str(const char *s) {
    return (str_t){(uint8_t *)s, strlen(s)};
}

static kv_imports_list_u8_t bytes(const char *s) {
    return (kv_imports_list_u8_t){(uint8_t *)s, strlen(s)};
}

static const char *const ERRORS[] = {
    "invalid-name", "reserved-name", "invalid-argument", "payload-too-large", "stale-receipt",
    "transaction-aborted", "busy", "store-setup", "internal",
};

// Prints what went wrong, frees it, and ends the run with status 1.
static void fail(const char *call, alk_store_kv_error_t *err) {
    // Every case but two carries its text alone.
    const str_t *text = err->tag == ALK_STORE_TYPES_ERROR_STORE_SETUP ? &err->val.store_setup.message
                        : err->tag == ALK_STORE_TYPES_ERROR_PAYLOAD_TOO_LARGE ? NULL
                                                                           : &err->val.internal;
    fprintf(stderr, "hello: %s: %s %.*s\n", call, err->tag < 9 ? ERRORS[err->tag] : "error",
            text ? (int)text->len : 0, text ? (const char *)text->ptr : "");
    alk_store_kv_error_free(err);
    exit(1);
}

int main(int argc, char **argv) {
    const char *visitor = argc > 1 ? argv[1] : "friend";
    alk_store_kv_error_t err;

    alk_store_kv_own_bucket_t own;
    str_t name = str("hello");
    if (!alk_store_kv_static_bucket_open(&name, &own, &err)) {
        fail("opening the bucket", &err);
    }
    alk_store_kv_borrow_bucket_t bucket = alk_store_kv_borrow_bucket(own);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    char text[32];

    // The first run ever claims the "since" key; later runs lose the race.
    bool first;
    str_t since = str("since");
    snprintf(text, sizeof text, "%" PRIu64, now);
    kv_imports_list_u8_t value = bytes(text);
    if (!alk_store_kv_method_bucket_set_if_absent(bucket, &since, &value, NULL, &first, &err)) {
        fail("set-if-absent", &err);
    }

    // The counter: read, add one, write back.
    str_t visits_key = str("visits");
    kv_imports_option_list_u8_t stored;
    if (!alk_store_kv_method_bucket_get(bucket, &visits_key, &stored, &err)) {
        fail("get", &err);
    }
    uint64_t visits = 1;
    if (stored.is_some && stored.val.len < sizeof text) {
        memcpy(text, stored.val.ptr, stored.val.len);
        text[stored.val.len] = '\0';
        visits += strtoull(text, NULL, 10);
    }
    kv_imports_option_list_u8_free(&stored);
    snprintf(text, sizeof text, "%" PRIu64, visits);
    value = bytes(text);
    if (!alk_store_kv_method_bucket_set(bucket, &visits_key, &value, NULL, &err)) {
        fail("set", &err);
    }

    // The guest book: one key per visit, in time order.
    char book_key[40];
    snprintf(book_key, sizeof book_key, "guest:%015" PRIu64, now);
    str_t key = str(book_key);
    value = bytes(visitor);
    if (!alk_store_kv_method_bucket_set(bucket, &key, &value, NULL, &err)) {
        fail("set", &err);
    }

    printf("Hello, %s!\n", visitor);
    if (first) {
        printf("This is the first run; alk will remember it.\n");
    } else {
        printf("This app has now run %" PRIu64 " times.\n", visits);
    }

    str_t prefix = str("guest:");
    alk_store_kv_scan_page_t page;
    if (!alk_store_kv_method_bucket_scan_prefix(bucket, &prefix, NULL, 1000, &page, &err)) {
        fail("scan-prefix", &err);
    }
    printf("Most recent visitors: ");
    for (size_t shown = 0; shown < 3 && shown < page.entries.len; shown++) {
        const kv_imports_list_u8_t *v = &page.entries.ptr[page.entries.len - 1 - shown].value;
        printf("%s%.*s", shown ? ", " : "", (int)v->len, (const char *)v->ptr);
    }
    printf("\n");
    alk_store_kv_scan_page_free(&page);
    alk_store_kv_bucket_drop_own(own);
    return 0;
}
