# The platform seam: only engine/src/platform talks to the operating system. Every other
# engine file (src, include, private) and every front-end file (app/, ui/) includes no OS
# header and reads no /proc or /sys path; a new one would make k3 Linux-only again, so
# this check names the line. The front ends reach the OS through the engine's public
# platform headers (k3/console.hpp, k3/net.hpp, k3/process.hpp). Third-party headers they
# include (cpp-httplib, Qt) are not ours and are not read.
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
    # The front ends: an OS header in app/ and in ui/; a third-party header that includes
    # OS headers itself (cpp-httplib) and a public platform header are fine.
    file(WRITE ${tree}/app/cli/ThirdParty.cpp
        "#include <httplib.h>\n#include <k3/net.hpp>\n#include <csignal>\n")
    file(WRITE ${tree}/app/cli/PlantedApp.cpp "#include <string>\n#include <arpa/inet.h>\n")
    file(WRITE ${tree}/ui/PlantedUi.h "#pragma once\n#include <windows.h>\n")
    include(${CMAKE_CURRENT_LIST_DIR}/SourceCheckSelfTest.cmake)
    k3_run_planted_check(${tree} "platform seam"
        EXPECTED "engine/src/memory/Planted.cpp:" "#  include <sys/mman.h>"
            "engine/private/k3/planted_proc.hpp: const char"
            "app/cli/PlantedApp.cpp: #include <arpa/inet.h>"
            "ui/PlantedUi.h: #include <windows.h>"
        UNEXPECTED "Allowed.cpp" "Clean.cpp" "ThirdParty.cpp")
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
file(GLOB_RECURSE front_end_sources RELATIVE ${SOURCE_DIR}
    ${SOURCE_DIR}/app/*.cpp ${SOURCE_DIR}/app/*.hpp ${SOURCE_DIR}/app/*.h
    ${SOURCE_DIR}/ui/*.cpp ${SOURCE_DIR}/ui/*.hpp ${SOURCE_DIR}/ui/*.h)
if(NOT front_end_sources)
    message(FATAL_ERROR "no front-end sources found under ${SOURCE_DIR}/app and ${SOURCE_DIR}/ui")
endif()
# POSIX, Linux, macOS and Windows headers (sockets included); <cpuid.h> and <immintrin.h>
# are the compiler's, not the OS's, and <csignal> is the C++ library's.
set(os_header "(unistd|fcntl|dirent|dlfcn|poll|pthread|pwd|grp|sched|signal|termios|malloc|liburing|netdb|ifaddrs|spawn|windows|winbase|winioctl|winsock|winsock2|ws2tcpip|mswsock|iphlpapi|io|direct|process|psapi|shlobj|shellapi|conio)\\.h|(sys|linux|asm|mach|mach-o|arpa|netinet|net)/")
set(violations "")
foreach(source IN LISTS engine_sources front_end_sources)
    file(STRINGS ${SOURCE_DIR}/${source} lines
        REGEX "^[ \t]*#[ \t]*include[ \t]*<(${os_header})|\"/(proc|sys)/")
    foreach(line IN LISTS lines)
        list(APPEND violations "${source}: ${line}")
    endforeach()
endforeach()
if(violations)
    list(JOIN violations "\n  " text)
    message(FATAL_ERROR "files outside engine/src/platform call the OS directly (move the "
        "call behind engine/src/platform/Platform.hpp, or for app/ and ui/ behind a public "
        "platform header: k3/console.hpp, k3/net.hpp, k3/process.hpp):\n  ${text}")
endif()
list(LENGTH engine_sources engine_count)
list(LENGTH front_end_sources front_end_count)
message(STATUS "${engine_count} engine files outside engine/src/platform and "
    "${front_end_count} app/ and ui/ files include no OS header")
