# The engine's public surface: engine/include/k3 headers include only the standard
# library and each other (no engine-private header, no third-party one), and ui/ includes
# only the public headers docs/architecture.md lists on its "UI seam headers:" line.
# cmake -DSOURCE_DIR=<repo> -P PublicHeaderCheck.cmake
# cmake -DSOURCE_DIR=<repo> -DSELF_TEST=ON -DWORK_DIR=<scratch> -P PublicHeaderCheck.cmake
#   plants violations in a tree under WORK_DIR and passes only when the check run on that
#   tree fails naming each of them.
if(SELF_TEST)
    set(tree ${WORK_DIR}/public-header-self-test)
    file(REMOVE_RECURSE ${tree})
    file(WRITE ${tree}/docs/architecture.md "UI seam headers: `chat`, `launch`.\n")
    file(WRITE ${tree}/engine/include/k3/chat.hpp "#include <string>\n#include \"k3/launch.hpp\"\n")
    file(WRITE ${tree}/engine/include/k3/launch.hpp
        "#include <vector>\n#include <tsl/ordered_map.h>\n#include \"k3/kernels.hpp\"\n")
    file(WRITE ${tree}/engine/private/k3/kernels.hpp "#include <tsl/ordered_map.h>\n")
    file(WRITE ${tree}/ui/Clean.cpp "#include <k3/chat.hpp>\n#include <QWidget>\n")
    file(WRITE ${tree}/ui/Planted.cpp "#include <k3/launch.hpp>\n#include <k3/memory_plan.hpp>\n")
    include(${CMAKE_CURRENT_LIST_DIR}/SourceCheckSelfTest.cmake)
    k3_run_planted_check(${tree} "public header"
        EXPECTED "engine/include/k3/launch.hpp: #include <tsl/ordered_map.h>"
            "engine/include/k3/launch.hpp: #include \"k3/kernels.hpp\""
            "ui/Planted.cpp: #include <k3/memory_plan.hpp>"
        UNEXPECTED "chat.hpp:" "Clean.cpp" "Planted.cpp: #include <k3/launch.hpp>" "kernels.hpp:")
    return()
endif()

# Public headers: the standard library (<name> without a dot or a slash) and k3/ public
# headers, the generated version.hpp among them.
file(GLOB public RELATIVE ${SOURCE_DIR}/engine/include/k3 ${SOURCE_DIR}/engine/include/k3/*.hpp
    ${SOURCE_DIR}/engine/include/k3/*.hpp.in)
if(NOT public)
    message(FATAL_ERROR "no public headers found under ${SOURCE_DIR}/engine/include/k3")
endif()
set(public_names "")
foreach(header IN LISTS public)
    string(REGEX REPLACE "\\.in$" "" header "${header}")
    list(APPEND public_names "${header}")
endforeach()
set(violations "")
foreach(header IN LISTS public)
    file(STRINGS ${SOURCE_DIR}/engine/include/k3/${header} lines REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS lines)
        string(REGEX MATCH "[<\"]([^>\"]+)[>\"]" _ "${line}")
        set(target "${CMAKE_MATCH_1}")
        if(target MATCHES "^k3/(.+)$")
            list(FIND public_names "${CMAKE_MATCH_1}" at)
            if(at EQUAL -1)
                list(APPEND violations "engine/include/k3/${header}: ${line}")
            endif()
        elseif(NOT line MATCHES "<[a-z_0-9]+>")
            list(APPEND violations "engine/include/k3/${header}: ${line}")
        endif()
    endforeach()
endforeach()
set(problems "")
if(violations)
    list(JOIN violations "\n  " text)
    string(APPEND problems "public engine headers include a private or third-party header "
        "(move the type behind the seam, into engine/private or engine/src):\n  ${text}\n")
endif()
set(violations "")

# ui/: only the headers docs/architecture.md lists.
file(STRINGS ${SOURCE_DIR}/docs/architecture.md seam_line REGEX "^UI seam headers:")
string(REGEX MATCHALL "`[a-z_0-9]+`" seam "${seam_line}")
string(REPLACE "`" "" seam "${seam}")
if(NOT seam)
    message(FATAL_ERROR "docs/architecture.md has no \"UI seam headers:\" line naming the headers")
endif()
file(GLOB_RECURSE ui_sources RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/ui/*.h ${SOURCE_DIR}/ui/*.cpp)
foreach(source IN LISTS ui_sources)
    file(STRINGS ${SOURCE_DIR}/${source} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]k3/")
    foreach(line IN LISTS lines)
        string(REGEX MATCH "k3/([a-z_0-9]+)\\.hpp" _ "${line}")
        list(FIND seam "${CMAKE_MATCH_1}" at)
        if(at EQUAL -1)
            list(APPEND violations "${source}: ${line}")
        endif()
    endforeach()
endforeach()
if(violations)
    list(JOIN violations "\n  " text)
    string(APPEND problems "ui/ includes engine headers that docs/architecture.md does not "
        "list on its \"UI seam headers:\" line (widen the seam there, on purpose, or use a "
        "listed one):\n  ${text}\n")
endif()
if(problems)
    message(FATAL_ERROR "${problems}")
endif()
list(LENGTH public count)
message(STATUS "${count} public engine headers include only the standard library and each "
    "other; ui/ includes only the ${seam_line}")
