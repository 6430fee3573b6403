#pragma once
// XXH3, the checksum of trunks, packs and state files. On x86-64 through libxxhash's
// run-time dispatch (AVX2 where present, the same hash values): its plain entry points
// are the portable build, ~1.4x slower there (bench_trunk_codec). Elsewhere (ARM64) the
// plain entry points, which pick NEON at compile time.
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif
