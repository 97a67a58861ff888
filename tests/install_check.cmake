# `cmake --install` (issue 21) puts the binary, its man page and the bash and zsh completions under a
# prefix; run by ctest as Install.PutsBinaryManPageAndCompletions with -DBUILD=<build dir> -DPREFIX=<dir>,
# and -DCUDA_PLUGIN=<its path under the prefix> when the CUDA backend (a plugin) is built.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD}" --prefix "${PREFIX}" RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
include(GNUInstallDirs)
foreach(f "${CMAKE_INSTALL_BINDIR}/moesim" "${CMAKE_INSTALL_MANDIR}/man1/moesim.1"
          "${CMAKE_INSTALL_DATADIR}/bash-completion/completions/moesim" "${CMAKE_INSTALL_DATADIR}/zsh/site-functions/_moesim")
  if(NOT EXISTS "${PREFIX}/${f}")
    message(FATAL_ERROR "cmake --install did not install ${f}")
  endif()
endforeach()
execute_process(COMMAND "${PREFIX}/${CMAKE_INSTALL_BINDIR}/moesim" --version RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed moesim does not run: ${rc}")
endif()
if(CUDA_PLUGIN)
  if(NOT EXISTS "${PREFIX}/${CUDA_PLUGIN}")
    message(FATAL_ERROR "cmake --install did not install the CUDA plugin ${CUDA_PLUGIN}")
  endif()
  # The installed binary finds and loads it: on a machine without a GPU the plugin itself says so.
  execute_process(COMMAND "${PREFIX}/${CMAKE_INSTALL_BINDIR}/moesim" calibrate memory --backend cuda
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(err MATCHES "not installed|cannot load|not the CUDA plugin")
    message(FATAL_ERROR "the installed moesim does not load its CUDA plugin: ${err}")
  endif()
endif()
file(REMOVE_RECURSE "${PREFIX}")
