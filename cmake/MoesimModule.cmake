# moesim_module(NAME SOURCES a.cpp b.cpp DEPS other_module ...)
# Declares the library moesim_<NAME> from a top-level folder: public headers in <folder>/include
# (included as <moesim/NAME/...>), implementation files beside them, and the modules it depends on.
function(moesim_module NAME)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(moesim_${NAME} STATIC ${ARG_SOURCES})
  target_include_directories(moesim_${NAME} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_link_libraries(moesim_${NAME} PUBLIC ${ARG_DEPS})
  add_library(moesim::${NAME} ALIAS moesim_${NAME})
endfunction()
