# Build facts recorded in every run.json, so a result can be traced to the code that produced it.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                OUTPUT_VARIABLE MWB_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                OUTPUT_VARIABLE MWB_GIT_DIRTY OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT MWB_GIT_COMMIT)
  set(MWB_GIT_COMMIT "unknown")
endif()
if(MWB_GIT_DIRTY)
  string(APPEND MWB_GIT_COMMIT "-dirty")
endif()
