# Runs examples/c/echo_router.c with three lines on stdin (a message, a chat command making a second
# Session, a message to it) against a local backend in a fresh state directory, and checks the
# transcript it prints and its exit status.
execute_process(COMMAND mktemp -d /tmp/st_c_echo_router_XXXXXX OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE)
file(WRITE ${dir}/input.txt "hello there\n/new second\nin the second one\n")
# The runtimes are child processes: sessionturn-local-runtime is found on PATH.
get_filename_component(runtime_dir ${RUNTIME} DIRECTORY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PATH=${runtime_dir}:$ENV{PATH}" ${EXE} --provider echo --state ${dir}/state
                INPUT_FILE ${dir}/input.txt OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 100)
file(GLOB sessions LIST_DIRECTORIES true ${dir}/state/sessions/*)
# The example's runtimes are processes of their own that outlive it (they would exit after 30 idle
# minutes): the test that started them stops them.
file(GLOB pid_files ${dir}/state/sessions/*/runtime.pid)
foreach(pid_file ${pid_files})
  file(READ ${pid_file} pid)
  string(STRIP "${pid}" pid)
  if(pid MATCHES "^[0-9]+$")
    execute_process(COMMAND kill ${pid} RESULT_VARIABLE ignored ERROR_QUIET)
  endif()
endforeach()
file(REMOVE_RECURSE ${dir})
message(STATUS "stdout:\n${out}\nstderr:\n${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the example exited with ${rc}")
endif()
foreach(expected "echo #1: [terminal message from me (me)]\nhello there" "second"
        "echo #1: [terminal message from me (me)]\nin the second one")
  string(FIND "${out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the example's output lacks \"${expected}\"")
  endif()
endforeach()
list(LENGTH sessions n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "expected 2 Sessions under the state directory, found ${n}: ${sessions}")
endif()
