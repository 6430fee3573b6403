// Cross builds with K3_CROSS_DEPS_PREFIX compile xxHash in (XXH_INLINE_ALL) instead of
// linking a target libxxhash, which Debian does not build for MinGW. libxxhash's x86
// dispatch needs its .c file, so here the dispatch header is xxhash.h itself: the
// portable entry points, the same hash values.
#pragma once
#include <xxhash.h>
