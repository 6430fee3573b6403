// A test-only LD_PRELOAD library (see IoHook.h): it stands in front of libc's open, open64,
// openat, openat64, creat, fopen, mkstemp, rename, renameat, fsync and fdatasync, records
// the calling thread and the path, and calls the real function. Written in C: glibc's
// C++ declarations of these carry exception specifications a definition must not differ
// from. Calls glibc makes to itself (fopen's own open, mkstemp's) do not go through the
// PLT, so each public entry point a program calls is hooked itself.
#undef _FILE_OFFSET_BITS // open and open64 are then two symbols, each defined below
#undef _FORTIFY_SOURCE   // no inline wrappers over the definitions
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "IoHook.h"

enum { OpenRead = K3IoOpenRead, OpenWrite = K3IoOpenWrite, Rename = K3IoRename, Sync = K3IoSync };
typedef K3IoRecord Record;

// Large enough for a whole GUI test's opens (Qt's fonts, icons and plugins included);
// a record that does not fit is counted, and the test fails on any.
enum { kCapacity = 1 << 15 };
static Record records[kCapacity];
static atomic_bool ready[kCapacity];
static atomic_int used;
static atomic_int dropped;

// libc's own function, looked up once (the lookup is idempotent; the atomic keeps two
// threads' first calls from racing).
#define NEXT(type, name)                                                                           \
    static _Atomic(void*) next_;                                                                   \
    void* found_ = atomic_load_explicit(&next_, memory_order_relaxed);                             \
    if (!found_) {                                                                                 \
        found_ = dlsym(RTLD_NEXT, name);                                                           \
        atomic_store_explicit(&next_, found_, memory_order_relaxed);                               \
    }                                                                                              \
    __typeof__(type) real = (type)found_

static void record(int op, const char* path) {
    const int slot = atomic_fetch_add(&used, 1);
    if (slot >= kCapacity) {
        atomic_fetch_add(&dropped, 1);
        return;
    }
    Record* r = &records[slot];
    r->tid = (pid_t)syscall(SYS_gettid);
    r->op = op;
    snprintf(r->path, sizeof r->path, "%s", path ? path : "");
    atomic_store_explicit(&ready[slot], true, memory_order_release);
}

// What descriptor `fd` names (a folder for openat, the synced file for fsync).
static void fdPath(int fd, char* out, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, out, size - 1);
    out[n > 0 ? n : 0] = '\0';
}

// A relative `path` under descriptor `dirfd`, made absolute so a test can filter by folder.
static void recordAt(int op, int dirfd, const char* path) {
    if (!path || path[0] == '/' || dirfd == AT_FDCWD) {
        record(op, path);
        return;
    }
    char dir[400], full[512];
    fdPath(dirfd, dir, sizeof dir);
    snprintf(full, sizeof full, "%s/%s", dir, path);
    record(op, full);
}

static int writes(int flags) {
    return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0;
}

static int modeFollows(int flags) {
    return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
}

int open(const char* path, int flags, ...) {
    NEXT(int (*)(const char*, int, ...), "open");
    mode_t mode = 0;
    if (modeFollows(flags)) {
        va_list args;
        va_start(args, flags);
        mode = va_arg(args, mode_t);
        va_end(args);
    }
    record(writes(flags) ? OpenWrite : OpenRead, path);
    return real(path, flags, mode);
}

int open64(const char* path, int flags, ...) {
    NEXT(int (*)(const char*, int, ...), "open64");
    mode_t mode = 0;
    if (modeFollows(flags)) {
        va_list args;
        va_start(args, flags);
        mode = va_arg(args, mode_t);
        va_end(args);
    }
    record(writes(flags) ? OpenWrite : OpenRead, path);
    return real(path, flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
    NEXT(int (*)(int, const char*, int, ...), "openat");
    mode_t mode = 0;
    if (modeFollows(flags)) {
        va_list args;
        va_start(args, flags);
        mode = va_arg(args, mode_t);
        va_end(args);
    }
    recordAt(writes(flags) ? OpenWrite : OpenRead, dirfd, path);
    return real(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char* path, int flags, ...) {
    NEXT(int (*)(int, const char*, int, ...), "openat64");
    mode_t mode = 0;
    if (modeFollows(flags)) {
        va_list args;
        va_start(args, flags);
        mode = va_arg(args, mode_t);
        va_end(args);
    }
    recordAt(writes(flags) ? OpenWrite : OpenRead, dirfd, path);
    return real(dirfd, path, flags, mode);
}

// The fortified forms a caller compiled with _FORTIFY_SOURCE reaches instead of open.
int __open_2(const char* path, int flags) {
    NEXT(int (*)(const char*, int), "__open_2");
    record(writes(flags) ? OpenWrite : OpenRead, path);
    return real(path, flags);
}

int __open64_2(const char* path, int flags) {
    NEXT(int (*)(const char*, int), "__open64_2");
    record(writes(flags) ? OpenWrite : OpenRead, path);
    return real(path, flags);
}

int creat(const char* path, mode_t mode) {
    NEXT(int (*)(const char*, mode_t), "creat");
    record(OpenWrite, path);
    return real(path, mode);
}

int creat64(const char* path, mode_t mode) {
    NEXT(int (*)(const char*, mode_t), "creat64");
    record(OpenWrite, path);
    return real(path, mode);
}

static int fopenWrites(const char* mode) {
    return mode && (strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+'));
}

FILE* fopen(const char* path, const char* mode) {
    NEXT(FILE * (*)(const char*, const char*), "fopen");
    record(fopenWrites(mode) ? OpenWrite : OpenRead, path);
    return real(path, mode);
}

FILE* fopen64(const char* path, const char* mode) {
    NEXT(FILE * (*)(const char*, const char*), "fopen64");
    record(fopenWrites(mode) ? OpenWrite : OpenRead, path);
    return real(path, mode);
}

// The temporary file of an atomic write (the path is known once it exists).
int mkstemp(char* tmpl) {
    NEXT(int (*)(char*), "mkstemp");
    const int fd = real(tmpl);
    record(OpenWrite, tmpl);
    return fd;
}

int mkstemp64(char* tmpl) {
    NEXT(int (*)(char*), "mkstemp64");
    const int fd = real(tmpl);
    record(OpenWrite, tmpl);
    return fd;
}

int mkostemp(char* tmpl, int flags) {
    NEXT(int (*)(char*, int), "mkostemp");
    const int fd = real(tmpl, flags);
    record(OpenWrite, tmpl);
    return fd;
}

int mkostemp64(char* tmpl, int flags) {
    NEXT(int (*)(char*, int), "mkostemp64");
    const int fd = real(tmpl, flags);
    record(OpenWrite, tmpl);
    return fd;
}

int rename(const char* from, const char* to) {
    NEXT(int (*)(const char*, const char*), "rename");
    record(Rename, to);
    return real(from, to);
}

int renameat(int fromDir, const char* from, int toDir, const char* to) {
    NEXT(int (*)(int, const char*, int, const char*), "renameat");
    recordAt(Rename, toDir, to);
    return real(fromDir, from, toDir, to);
}

int renameat2(int fromDir, const char* from, int toDir, const char* to, unsigned flags) {
    NEXT(int (*)(int, const char*, int, const char*, unsigned), "renameat2");
    recordAt(Rename, toDir, to);
    return real(fromDir, from, toDir, to, flags);
}

int fsync(int fd) {
    NEXT(int (*)(int), "fsync");
    char path[512];
    fdPath(fd, path, sizeof path);
    record(Sync, path);
    return real(fd);
}

int fdatasync(int fd) {
    NEXT(int (*)(int), "fdatasync");
    char path[512];
    fdPath(fd, path, sizeof path);
    record(Sync, path);
    return real(fd);
}

// The query side (IoHook.h), found by the test with dlsym.
int k3iohook_count(void) {
    const int n = atomic_load(&used);
    return n < kCapacity ? n : kCapacity;
}

bool k3iohook_record(int index, Record* out) {
    if (index < 0 || index >= kCapacity ||
        !atomic_load_explicit(&ready[index], memory_order_acquire))
        return false;
    *out = records[index];
    return true;
}

int k3iohook_dropped(void) {
    return atomic_load(&dropped);
}
