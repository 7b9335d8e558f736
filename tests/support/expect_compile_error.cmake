# Passes when SOURCE fails to compile AND the compiler's output matches the regex on the
# source's first line, `// expect: <regex>` (a CMake regular expression).
file(STRINGS ${SOURCE} first_line LIMIT_COUNT 1)
if(NOT first_line MATCHES "^// expect: (.+)$")
  message(FATAL_ERROR "${SOURCE}: the first line must be `// expect: <regex>`")
endif()
set(expected "${CMAKE_MATCH_1}")
set(system_includes "")
foreach(dir IN LISTS SYSTEM_INCLUDES)
  list(APPEND system_includes -isystem ${dir})
endforeach()
# PCH: a header precompiled with these flags (tests/CMakeLists.txt), included first.
set(precompiled "")
if(PCH)
  set(precompiled -include ${PCH} -Winvalid-pch)
endif()
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${system_includes}
                        ${precompiled} ${SOURCE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not")
endif()
if(NOT "${out}${err}" MATCHES "${expected}")
  message(FATAL_ERROR "${SOURCE} failed to compile, but the diagnostic does not match\n"
                      "  ${expected}\n--- compiler output ---\n${out}${err}")
endif()
message(STATUS "failed to compile as expected; diagnostic matches: ${expected}")
