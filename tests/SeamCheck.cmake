# The engine seam: ui/ and app/ include only engine/include/k3 headers. The k3ui and k3
# targets cannot see engine/private (a PRIVATE include dir of k3engine), so such an
# include does not compile; this check names the offending line instead of a compiler
# error, and also catches quoted includes of a private header by a relative path.
# cmake -DSOURCE_DIR=<repo> -P SeamCheck.cmake
file(GLOB private_headers RELATIVE ${SOURCE_DIR}/engine/private/k3 ${SOURCE_DIR}/engine/private/k3/*.hpp)
if(NOT private_headers)
    message(FATAL_ERROR "no private headers found under ${SOURCE_DIR}/engine/private/k3")
endif()
file(GLOB_RECURSE front_end_sources ${SOURCE_DIR}/ui/*.h ${SOURCE_DIR}/ui/*.cpp
    ${SOURCE_DIR}/app/*.h ${SOURCE_DIR}/app/*.hpp ${SOURCE_DIR}/app/*.cpp)
set(violations "")
foreach(source IN LISTS front_end_sources)
    file(STRINGS ${source} includes REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS includes)
        foreach(header IN LISTS private_headers)
            string(FIND "${line}" "k3/${header}" at)
            if(NOT at EQUAL -1)
                list(APPEND violations "${source}: ${line}")
            endif()
        endforeach()
    endforeach()
endforeach()
if(violations)
    list(JOIN violations "\n  " text)
    message(FATAL_ERROR "front ends include engine-private headers:\n  ${text}")
endif()
list(LENGTH front_end_sources count)
message(STATUS "${count} ui/ and app/ files include only public engine headers")
