# Windows x86-64 with Debian's MinGW-w64 (apt install g++-mingw-w64-x86-64-posix: the
# posix thread model, which std::thread and OpenMP need). Used with cmake/cross:
#   cmake -S cmake/cross -B build/mingw -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/mingw-w64.cmake
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(K3_CROSS_TRIPLE x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${K3_CROSS_TRIPLE}-gcc-posix)
set(CMAKE_CXX_COMPILER ${K3_CROSS_TRIPLE}-g++-posix)
set(CMAKE_RC_COMPILER ${K3_CROSS_TRIPLE}-windres)
set(CMAKE_FIND_ROOT_PATH /usr/${K3_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Programs built here run under wine; the MinGW runtime DLLs are linked in statically so
# that no PATH set-up is needed.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static-libgcc -static-libstdc++ -static")
find_program(K3_WINE NAMES wine wine64 PATHS /usr/lib/wine NO_CMAKE_FIND_ROOT_PATH)
if(K3_WINE)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${K3_WINE})
endif()
# OpenMP linked in statically too (FindOpenMP would pick libgomp.dll.a, and so a
# libgomp-1.dll beside every program).
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libgomp.a
    OUTPUT_VARIABLE K3_STATIC_GOMP OUTPUT_STRIP_TRAILING_WHITESPACE)
if(EXISTS "${K3_STATIC_GOMP}")
    set(OpenMP_gomp_LIBRARY ${K3_STATIC_GOMP} CACHE FILEPATH "libgomp, linked statically" FORCE)
endif()
