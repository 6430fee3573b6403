#pragma once
// The test-only I/O hook (IoHook.c, built as libk3_iohook.so and put in front of libc
// with LD_PRELOAD by ctest for the tests that use it): every open, creat, fopen, mkstemp,
// rename and fsync the process makes is recorded with the calling thread's id. A test
// finds the functions below with dlsym(RTLD_DEFAULT, ...), so it links nothing extra and
// fails with a clear message when it runs without the preload. Valid C (the hook) and C++
// (the tests).

#include <stdbool.h>
#include <sys/types.h>

enum K3IoOp {
    K3IoOpenRead = 0, // an open for reading only (O_RDONLY, fopen "r")
    K3IoOpenWrite,    // an open that can write or create (O_WRONLY, O_RDWR, O_CREAT,
                      // O_TRUNC; creat; mkstemp; fopen "w", "a", "+")
    K3IoRename,       // rename, renameat, renameat2: `path` is the new name
    K3IoSync          // fsync, fdatasync: `path` is what the descriptor names
};

typedef struct K3IoRecord {
    pid_t tid; // gettid() of the calling thread
    int op;    // a K3IoOp
    char path[512];
} K3IoRecord;

#ifdef __cplusplus
extern "C" {
#endif
// How many records there are (records are never removed; a test remembers a start).
typedef int (*K3IoCountFn)(void);
// Copies record `index` into `out`; false when it does not exist (yet).
typedef bool (*K3IoRecordFn)(int index, K3IoRecord* out);
// Records lost because the buffer was full (a test asserts 0).
typedef int (*K3IoDroppedFn)(void);
#ifdef __cplusplus
}
#endif
