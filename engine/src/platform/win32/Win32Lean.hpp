#pragma once
// Included before any Windows header of the platform layer: the lean <windows.h> (no
// Winsock 1 to clash with <winsock2.h>) and no min/max macros over std::min/std::max.
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
