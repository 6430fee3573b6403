# The settings seam: every setting is declared once in ui/SettingsTable.h and read and
# written through Settings (ui/Settings.cpp is the only file that uses QSettings). Any other
# file in ui/ or app/ that includes or constructs QSettings, or names a key of the table as
# a string literal, is named here: such a read skips the table's default and range, and a
# write skips its change signal. Comments are not read.
# cmake -DSOURCE_DIR=<repo> -P SettingsKeyCheck.cmake
# cmake -DSOURCE_DIR=<repo> -DSELF_TEST=ON -DWORK_DIR=<scratch> -P SettingsKeyCheck.cmake
#   plants violations in a scratch tree under WORK_DIR and passes only when the check run
#   on that tree fails naming each of them and nothing else.
cmake_policy(SET CMP0007 NEW) # a source line with a ';' is split into list items
set(table ui/SettingsTable.h)
set(allowed ui/SettingsTable.h ui/Settings.cpp)
if(SELF_TEST)
    set(tree ${WORK_DIR}/settings-key-self-test)
    file(REMOVE_RECURSE ${tree})
    file(WRITE ${tree}/${table}
        "inline const Setting<bool> a{QStringLiteral(\"chat/keepThinkingExpanded\"), false};\n"
        "inline const Setting<QString> b{QStringLiteral(\"remote/url\")};\n")
    file(WRITE ${tree}/ui/Settings.cpp "#include <QSettings>\nQSettings().value(key);\n")
    # Clean: a comment naming QSettings and a key, a path that only looks like a key.
    file(WRITE ${tree}/ui/chat/Clean.cpp
        "// never in QSettings (group chat/keepThinkingExpanded)\n"
        "const QString p = dir + QStringLiteral(\"/images\"); // \"remote/url\"\n"
        "Settings::value(SettingsTable::remoteUrl);\n")
    file(WRITE ${tree}/ui/PlantedInclude.h "#pragma once\n#  include <QSettings>\n")
    file(WRITE ${tree}/ui/wizard/PlantedObject.cpp "void f() {\n    QSettings settings;\n}\n")
    file(WRITE ${tree}/ui/PlantedTemporary.cpp "bool b = QSettings().contains(k);\n")
    file(WRITE ${tree}/app/PlantedKey.cpp
        "auto u = settings.value(QStringLiteral(\"remote/url\"));\n")
    file(WRITE ${tree}/ui/chat/PlantedKey.cpp "const char* k = \"chat/keepThinkingExpanded\";\n")
    include(${CMAKE_CURRENT_LIST_DIR}/SourceCheckSelfTest.cmake)
    k3_run_planted_check(${tree} "settings seam"
        EXPECTED "ui/PlantedInclude.h: #  include <QSettings>"
            "ui/wizard/PlantedObject.cpp:     QSettings settings"
            "ui/PlantedTemporary.cpp: bool b = QSettings().contains(k)"
            "app/PlantedKey.cpp: auto u = settings.value(QStringLiteral(\"remote/url\"))"
            "ui/chat/PlantedKey.cpp: const char* k = \"chat/keepThinkingExpanded\""
        UNEXPECTED "Clean.cpp" "ui/Settings.cpp:" "SettingsTable.h:")
    return()
endif()

# The table's keys: the string literals of ui/SettingsTable.h that look like "group/name".
file(STRINGS ${SOURCE_DIR}/${table} table_lines REGEX "\"[A-Za-z]+(/[A-Za-z]+)+\"")
set(keys "")
foreach(line IN LISTS table_lines)
    string(REGEX MATCHALL "\"[A-Za-z]+(/[A-Za-z]+)+\"" found "${line}")
    list(APPEND keys ${found})
endforeach()
list(REMOVE_DUPLICATES keys)
if(NOT keys)
    message(FATAL_ERROR "no settings keys found in ${SOURCE_DIR}/${table}")
endif()

file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}
    ${SOURCE_DIR}/ui/*.cpp ${SOURCE_DIR}/ui/*.h ${SOURCE_DIR}/ui/*.hpp
    ${SOURCE_DIR}/app/*.cpp ${SOURCE_DIR}/app/*.h ${SOURCE_DIR}/app/*.hpp)
list(REMOVE_ITEM sources ${allowed})
# QSettings included, constructed as a temporary, or declared as an object.
set(uses_qsettings "#[ \t]*include[ \t]*<QSettings>|QSettings[ \t]*[({]|QSettings[ \t]+[A-Za-z_][A-Za-z0-9_]*[ \t]*([;({]|$)")
set(violations "")
foreach(source IN LISTS sources)
    file(STRINGS ${SOURCE_DIR}/${source} lines REGEX "QSettings|\"[A-Za-z]+/[A-Za-z/]+\"")
    foreach(line IN LISTS lines)
        string(REGEX REPLACE "//.*$" "" code "${line}") # a comment may name them
        set(bad FALSE)
        if(code MATCHES "${uses_qsettings}")
            set(bad TRUE)
        endif()
        foreach(key IN LISTS keys)
            string(FIND "${code}" "${key}" at)
            if(NOT at EQUAL -1)
                set(bad TRUE)
            endif()
        endforeach()
        if(bad)
            list(APPEND violations "${source}: ${line}")
        endif()
    endforeach()
endforeach()
if(violations)
    list(JOIN violations "\n  " text)
    message(FATAL_ERROR "settings used outside the table (declare the setting in "
        "${table} and read or write it through Settings, ui/Settings.h):\n  ${text}")
endif()
list(LENGTH keys key_count)
list(LENGTH sources count)
message(STATUS "${count} ui/ and app/ files use the ${key_count} settings keys only "
    "through ${table}")
