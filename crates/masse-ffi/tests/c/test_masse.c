/*
 * The C API from C: every call family, errors with messages, reopen, and
 * several threads on one pool and one file. Built and run by tests/c_api.rs
 * (cc -std=c11 -Wall -Wextra -Werror, linked with libmasse_ffi.a).
 *
 *   test_masse DIR      pools go under DIR (fast tier and capacity files)
 */
#include "masse.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n", __FILE__,   \
                    __LINE__, #cond, masse_last_error());                            \
            failures++;                                                               \
        }                                                                             \
    } while (0)

#define OK(call)                                                                      \
    do {                                                                              \
        masse_status s_ = (call);                                                     \
        if (s_ != MASSE_OK) {                                                         \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,       \
                    masse_status_name(s_), masse_last_error());                      \
            failures++;                                                               \
        }                                                                             \
    } while (0)

static char fast_path[512], cap_path[512];

static masse_pool *open_pool(uint32_t create) {
    masse_pool_options o;
    masse_pool_options_init(&o);
    const char *caps[] = {cap_path};
    o.fast = fast_path;
    o.fast_size = 64u << 20;
    o.capacity = caps;
    o.capacity_count = 1;
    o.capacity_size = 256u << 20;
    o.create = create;
    o.chunk_size = 16384;
    masse_pool *p = NULL;
    OK(masse_pool_open(&o, &p));
    return p;
}

static void test_errors(void) {
    masse_pool_options o;
    masse_pool_options_init(&o);
    masse_pool *p = NULL;
    /* No capacity device: a clear error, no pool. */
    CHECK(masse_pool_open(&o, &p) == MASSE_INVALID);
    CHECK(p == NULL);
    CHECK(strstr(masse_last_error(), "capacity") != NULL);
    CHECK(masse_pool_open(NULL, &p) == MASSE_INVALID);
    CHECK(masse_pool_open_spec("capacity=/nonexistent/dir/c", &p) != MASSE_OK);
    CHECK(strlen(masse_last_error()) > 0);
    CHECK(masse_pool_open_spec("bogus=1", &p) == MASSE_INVALID);
    CHECK(strcmp(masse_status_name(MASSE_NO_SPACE), "MASSE_NO_SPACE") == 0);
    CHECK(strcmp(masse_status_name(12345), "unknown") == 0);
    CHECK(masse_status_errno(MASSE_NOT_FOUND) == 2);
}

static void test_kv(masse_pool *p) {
    OK(masse_put(p, (const uint8_t *)"alpha", 5, (const uint8_t *)"one", 3));
    OK(masse_put(p, (const uint8_t *)"beta", 4, (const uint8_t *)"", 0));
    uint8_t *v = NULL;
    size_t vl = 99;
    OK(masse_get(p, (const uint8_t *)"alpha", 5, &v, &vl));
    CHECK(vl == 3 && v && memcmp(v, "one", 3) == 0);
    free(v);
    OK(masse_get(p, (const uint8_t *)"beta", 4, &v, &vl));
    CHECK(vl == 0 && v != NULL);
    free(v);
    CHECK(masse_get(p, (const uint8_t *)"gamma", 5, &v, &vl) == MASSE_NOT_FOUND);
    /* An empty key is refused with a message naming keys. */
    CHECK(masse_put(p, (const uint8_t *)"", 0, (const uint8_t *)"x", 1) == MASSE_INVALID);
    CHECK(strstr(masse_last_error(), "key") != NULL);
    CHECK(masse_put(NULL, (const uint8_t *)"k", 1, (const uint8_t *)"x", 1) == MASSE_INVALID);

    bool existed = false;
    OK(masse_delete(p, (const uint8_t *)"beta", 4, &existed));
    CHECK(existed);
    OK(masse_delete(p, (const uint8_t *)"beta", 4, &existed));
    CHECK(!existed);

    /* A batch applies atomically. */
    masse_batch *b = masse_batch_new();
    OK(masse_batch_put(b, (const uint8_t *)"b1", 2, (const uint8_t *)"v1", 2));
    OK(masse_batch_put(b, (const uint8_t *)"b2", 2, (const uint8_t *)"v2", 2));
    OK(masse_batch_delete(b, (const uint8_t *)"alpha", 5));
    OK(masse_write(p, b));
    masse_batch_free(b);

    const uint8_t *keys[3] = {(const uint8_t *)"b1", (const uint8_t *)"alpha",
                              (const uint8_t *)"b2"};
    size_t klens[3] = {2, 5, 2};
    uint8_t *vals[3];
    size_t vlens[3];
    masse_status st[3];
    OK(masse_get_many(p, 3, keys, klens, vals, vlens, st));
    CHECK(st[0] == MASSE_OK && vlens[0] == 2 && memcmp(vals[0], "v1", 2) == 0);
    CHECK(st[1] == MASSE_NOT_FOUND && vals[1] == NULL);
    CHECK(st[2] == MASSE_OK && memcmp(vals[2], "v2", 2) == 0);
    free(vals[0]);
    free(vals[2]);

    /* Iteration sees b1 and b2 (and nothing deleted). */
    masse_iter *it = NULL;
    OK(masse_iter_new(p, &it));
    const uint8_t *k, *val;
    size_t kl, vl2;
    int seen = 0, n = 0;
    masse_status s;
    while ((s = masse_iter_next(it, &k, &kl, &val, &vl2)) == MASSE_OK) {
        n++;
        if (kl == 2 && k[0] == 'b') seen++;
        CHECK(!(kl == 5 && memcmp(k, "alpha", 5) == 0));
    }
    CHECK(s == MASSE_NOT_FOUND);
    CHECK(seen == 2 && n >= 2);
    /* The pool refuses to close while the iterator is open. */
    CHECK(masse_pool_close(p) == MASSE_BUSY);
    masse_iter_free(it);
}

static void test_files(masse_pool *p) {
    OK(masse_mkdir(p, "/db", 0755));
    CHECK(masse_mkdir(p, "/db", 0755) == MASSE_EXISTS);
    masse_file *f = NULL;
    OK(masse_file_open(p, "/db/000001.log", MASSE_O_CREATE | MASSE_O_EXCL, 0644, &f));
    CHECK(masse_file_open(p, "/db/000001.log", MASSE_O_CREATE | MASSE_O_EXCL, 0644,
                          &(masse_file *){NULL}) == MASSE_EXISTS);
    /* 100 KiB of a known pattern, appended in odd pieces. */
    enum { N = 100 * 1024 };
    uint8_t *data = malloc(N);
    for (int i = 0; i < N; i++) data[i] = (uint8_t)(i * 31 + 7);
    uint64_t at = 0;
    for (size_t off = 0; off < N; off += 3000) {
        size_t n = N - off < 3000 ? N - off : 3000;
        OK(masse_file_append(f, data + off, n, &at));
        CHECK(at == off);
    }
    OK(masse_file_datasync(f));
    masse_attr st;
    OK(masse_file_stat(f, &st));
    CHECK(st.size == N && st.kind == MASSE_KIND_FILE && st.blksize == 16384);

    /* pread: a 4 KiB block across a chunk boundary, a short read at the end. */
    uint8_t buf[8192];
    size_t got = 0;
    OK(masse_file_pread(f, buf, 4096, 16384 - 100, &got));
    CHECK(got == 4096 && memcmp(buf, data + 16384 - 100, 4096) == 0);
    OK(masse_file_pread(f, buf, 8192, N - 10, &got));
    CHECK(got == 10 && memcmp(buf, data + N - 10, 10) == 0);
    OK(masse_file_pread(f, buf, 10, N + 5, &got));
    CHECK(got == 0);

    /* read_many: three blocks at once. */
    uint8_t b1[4096], b2[4096], b3[100];
    masse_read_req reqs[3] = {
        {.offset = 0, .len = 4096, .buf = b1},
        {.offset = 50000, .len = 4096, .buf = b2},
        {.offset = N - 50, .len = 100, .buf = b3},
    };
    OK(masse_file_read_many(f, reqs, 3));
    CHECK(reqs[0].status == MASSE_OK && reqs[0].result == 4096 && memcmp(b1, data, 4096) == 0);
    CHECK(reqs[1].result == 4096 && memcmp(b2, data + 50000, 4096) == 0);
    CHECK(reqs[2].result == 50 && memcmp(b3, data + N - 50, 50) == 0);

    /* pwrite in the middle, truncate, then read back. */
    OK(masse_file_pwrite(f, (const uint8_t *)"HELLO", 5, 20000));
    memcpy(data + 20000, "HELLO", 5);
    OK(masse_file_truncate(f, 60000));
    OK(masse_file_sync(f));
    OK(masse_file_pread(f, buf, 8192, 19000, &got));
    CHECK(got == 8192 && memcmp(buf, data + 19000, 8192) == 0);
    OK(masse_file_close(f));

    /* rename, list, stat, unlink, rmdir. */
    OK(masse_rename(p, "/db/000001.log", "/db/CURRENT"));
    OK(masse_stat(p, "/db/CURRENT", &st));
    CHECK(st.size == 60000);
    CHECK(masse_stat(p, "/db/000001.log", &st) == MASSE_NOT_FOUND);
    OK(masse_mkdir(p, "/db/sub", 0700));
    masse_dirent *ents = NULL;
    size_t cnt = 0;
    OK(masse_list(p, "/db", &ents, &cnt));
    int found = 0;
    for (size_t i = 0; i < cnt; i++) {
        if (strcmp(ents[i].name, "CURRENT") == 0 && ents[i].kind == MASSE_KIND_FILE) found++;
        if (strcmp(ents[i].name, "sub") == 0 && ents[i].kind == MASSE_KIND_DIR) found++;
    }
    CHECK(cnt == 2 && found == 2);
    masse_list_free(ents, cnt);
    CHECK(masse_rmdir(p, "/db") == MASSE_NOT_EMPTY);
    OK(masse_rmdir(p, "/db/sub"));
    CHECK(masse_file_open(p, "/db", 0, 0, &f) == MASSE_IS_DIR);
    CHECK(masse_file_open(p, "/nope/x", MASSE_O_CREATE, 0644, &f) == MASSE_NOT_FOUND);

    /* Locks: a second lock of the same file is refused until the first goes. */
    masse_file_lock *l1 = NULL, *l2 = NULL;
    OK(masse_lock(p, "/db/LOCK", &l1));
    CHECK(masse_lock(p, "/db/LOCK", &l2) == MASSE_BUSY);
    OK(masse_unlock(l1));
    OK(masse_lock(p, "/db/LOCK", &l2));
    OK(masse_unlock(l2));
    free(data);
}

/* Threads: each appends its own records to its own file and puts its own keys,
 * all reading a shared file at once. */
struct job {
    masse_pool *p;
    masse_file *shared;
    int id;
    int errors;
};

static void *worker(void *arg) {
    struct job *j = arg;
    char path[64], key[32];
    snprintf(path, sizeof path, "/t%d", j->id);
    masse_file *f = NULL;
    if (masse_file_open(j->p, path, MASSE_O_CREATE | MASSE_O_TRUNC, 0644, &f) != MASSE_OK) {
        j->errors++;
        return NULL;
    }
    uint8_t rec[100], back[4096];
    for (int i = 0; i < 200; i++) {
        memset(rec, j->id * 16 + i % 16, sizeof rec);
        if (masse_file_append(f, rec, sizeof rec, NULL) != MASSE_OK) j->errors++;
        snprintf(key, sizeof key, "t%d-%d", j->id, i);
        if (masse_put(j->p, (const uint8_t *)key, strlen(key), rec, 10) != MASSE_OK) j->errors++;
        size_t got = 0;
        if (masse_file_pread(j->shared, back, 4096, (uint64_t)(i * 97) % 50000, &got) != MASSE_OK ||
            got != 4096)
            j->errors++;
        if (i % 50 == 49 && masse_file_sync(f) != MASSE_OK) j->errors++;
    }
    masse_attr st;
    if (masse_file_stat(f, &st) != MASSE_OK || st.size != 200 * 100) j->errors++;
    if (masse_file_close(f) != MASSE_OK) j->errors++;
    return NULL;
}

static void test_threads(masse_pool *p) {
    masse_file *shared = NULL;
    OK(masse_file_open(p, "/db/CURRENT", 0, 0, &shared));
    enum { T = 4 };
    pthread_t th[T];
    struct job jobs[T];
    for (int i = 0; i < T; i++) {
        jobs[i] = (struct job){.p = p, .shared = shared, .id = i, .errors = 0};
        CHECK(pthread_create(&th[i], NULL, worker, &jobs[i]) == 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].errors == 0);
    }
    OK(masse_file_close(shared));
}

static void test_reopen(void) {
    masse_pool *p = open_pool(MASSE_OPEN_EXISTING);
    if (!p) return;
    uint8_t *v = NULL;
    size_t vl = 0;
    OK(masse_get(p, (const uint8_t *)"t3-199", 6, &v, &vl));
    CHECK(vl == 10);
    free(v);
    masse_attr st;
    OK(masse_stat(p, "/t2", &st));
    CHECK(st.size == 200 * 100);
    masse_file *f = NULL;
    OK(masse_file_open(p, "/t2", 0, 0, &f));
    uint8_t buf[100];
    size_t got = 0;
    OK(masse_file_pread(f, buf, 100, 199 * 100, &got));
    CHECK(got == 100 && buf[0] == 2 * 16 + 199 % 16);
    OK(masse_file_close(f));
    OK(masse_pool_close(p));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    snprintf(fast_path, sizeof fast_path, "%s/fast", argv[1]);
    snprintf(cap_path, sizeof cap_path, "%s/cap", argv[1]);
    test_errors();
    masse_pool *p = open_pool(MASSE_CREATE_NEW);
    if (!p) return 1;
    /* A device without a pool is refused, not formatted. */
    masse_pool *again = NULL;
    CHECK(masse_pool_open_spec("capacity=/dev/null", &again) != MASSE_OK && again == NULL);
    test_kv(p);
    test_files(p);
    test_threads(p);
    OK(masse_pool_close(p));
    test_reopen();
    printf("c api: %d failures\n", failures);
    return failures == 0 ? 0 : 1;
}
