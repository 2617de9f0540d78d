# Runs examples/c/turn.c against a local runtime it starts itself (a script provider that asks one
# question), and checks the streamed reply, the answered question and the exit status.
execute_process(COMMAND mktemp -d /tmp/st_c_example_XXXXXX OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE)
file(WRITE ${dir}/script.json [=[
{"turns": [{"steps": [
  {"type": "delta", "text": "thinking... "},
  {"type": "question", "inputId": "q-1", "questions": [{"id": "color", "question": "Which color?",
   "options": [{"label": "red"}, {"label": "blue"}]}]},
  {"type": "message", "text": "got an answer"}
]}]}
]=])
execute_process(COMMAND ${EXE} --local --provider script:${dir}/script.json ${dir}/runtime.sock "pick a color"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 90)
file(REMOVE_RECURSE ${dir})
message(STATUS "stdout:\n${out}\nstderr:\n${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the example exited with ${rc}")
endif()
foreach(expected "thinking" "[question] Which color? -> red" "completed (questions answered 1, declined 0)"
        "Answers: color=red")
  string(FIND "${out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the example's output lacks \"${expected}\"")
  endif()
endforeach()
