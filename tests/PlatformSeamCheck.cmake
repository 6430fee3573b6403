# The platform seam: only engine/src/platform talks to the operating system. Every other
# engine file (src, include, private) includes no OS header and reads no /proc or /sys
# path; a new one would make the engine Linux-only again, so this check names the line.
# cmake -DSOURCE_DIR=<repo> -P PlatformSeamCheck.cmake
# cmake -DSOURCE_DIR=<repo> -DSELF_TEST=ON -DWORK_DIR=<scratch> -P PlatformSeamCheck.cmake
#   plants a violation in a copy-shaped tree under WORK_DIR and passes only when the
#   check run on that tree fails naming it (the check cannot silently stop seeing).
if(SELF_TEST)
    set(tree ${WORK_DIR}/platform-seam-self-test)
    file(REMOVE_RECURSE ${tree})
    file(WRITE ${tree}/engine/src/platform/posix/Allowed.cpp "#include <unistd.h>\n")
    file(WRITE ${tree}/engine/src/model/Clean.cpp "#include <vector>\n")
    file(WRITE ${tree}/engine/src/memory/Planted.cpp
        "#include <vector>\n  #  include <sys/mman.h>\nint x;\n")
    file(WRITE ${tree}/engine/private/k3/planted_proc.hpp
        "const char* p = \"/proc/self/status\";\n")
    include(${CMAKE_CURRENT_LIST_DIR}/SourceCheckSelfTest.cmake)
    k3_run_planted_check(${tree} "platform seam"
        EXPECTED "engine/src/memory/Planted.cpp:" "#  include <sys/mman.h>"
            "engine/private/k3/planted_proc.hpp: const char"
        UNEXPECTED "Allowed.cpp" "Clean.cpp")
    return()
endif()

file(GLOB_RECURSE engine_sources RELATIVE ${SOURCE_DIR}
    ${SOURCE_DIR}/engine/src/*.cpp ${SOURCE_DIR}/engine/src/*.hpp ${SOURCE_DIR}/engine/src/*.h
    ${SOURCE_DIR}/engine/include/*.hpp ${SOURCE_DIR}/engine/include/*.in
    ${SOURCE_DIR}/engine/private/*.hpp)
list(FILTER engine_sources EXCLUDE REGEX "^engine/src/platform/")
if(NOT engine_sources)
    message(FATAL_ERROR "no engine sources found under ${SOURCE_DIR}/engine")
endif()
# POSIX, Linux, macOS and Windows headers; <cpuid.h> and <immintrin.h> are the
# compiler's, not the OS's.
set(os_header "(unistd|fcntl|dirent|dlfcn|poll|pthread|pwd|grp|sched|signal|termios|malloc|liburing|windows|winbase|winioctl|io|direct|psapi)\\.h|(sys|linux|asm|mach|mach-o|arpa|netinet)/")
set(violations "")
foreach(source IN LISTS engine_sources)
    file(STRINGS ${SOURCE_DIR}/${source} lines
        REGEX "^[ \t]*#[ \t]*include[ \t]*<(${os_header})|\"/(proc|sys)/")
    foreach(line IN LISTS lines)
        list(APPEND violations "${source}: ${line}")
    endforeach()
endforeach()
if(violations)
    list(JOIN violations "\n  " text)
    message(FATAL_ERROR "engine files outside engine/src/platform call the OS directly (move "
        "the call behind engine/src/platform/Platform.hpp):\n  ${text}")
endif()
list(LENGTH engine_sources count)
message(STATUS "${count} engine files outside engine/src/platform include no OS header")
