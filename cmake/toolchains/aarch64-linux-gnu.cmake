# Linux on ARM64 with Debian's cross compiler (apt install g++-aarch64-linux-gnu
# qemu-user). Used with cmake/cross; its programs run under qemu-user:
#   cmake -S cmake/cross -B build/aarch64 -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(K3_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${K3_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${K3_CROSS_TRIPLE}-g++)
set(CMAKE_FIND_ROOT_PATH /usr/${K3_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
find_program(K3_QEMU_AARCH64 qemu-aarch64 NO_CMAKE_FIND_ROOT_PATH)
if(K3_QEMU_AARCH64)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${K3_QEMU_AARCH64} -L /usr/${K3_CROSS_TRIPLE})
endif()
