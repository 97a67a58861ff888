# moesim_embed_files(TARGET name NAMESPACE ns FILES f1 f2 ... BASE dir)
# Compiles data files (model zoo configs, hardware profiles) into the binary, so `moesim` works from any
# directory. Generates <ns>::embedded_files(): a list of {relative path, contents}. Regenerated when any
# listed file changes.
set(MOESIM_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_script.cmake)
function(moesim_embed_files)
  cmake_parse_arguments(ARG "" "TARGET;NAMESPACE;BASE" "FILES" ${ARGN})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${ARG_TARGET}_embedded.cpp)
  string(REPLACE ";" "|" files_arg "${ARG_FILES}")
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DNS=${ARG_NAMESPACE} -DBASE=${ARG_BASE} "-DFILES=${files_arg}"
            -P ${MOESIM_EMBED_SCRIPT}
    DEPENDS ${ARG_FILES} ${MOESIM_EMBED_SCRIPT}
    COMMENT "Embedding ${ARG_TARGET} data files"
    VERBATIM)
  add_library(${ARG_TARGET} STATIC ${out})
  # A data file is one string literal, longer than the 65,536 characters C++ guarantees; GCC and Clang
  # both take it, and Clang's -Wpedantic says so (-Woverlength-strings).
  target_compile_options(${ARG_TARGET} PRIVATE -Wno-overlength-strings)
  target_include_directories(${ARG_TARGET} PUBLIC ${PROJECT_SOURCE_DIR}/model/include)
endfunction()
