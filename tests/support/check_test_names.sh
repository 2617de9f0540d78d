#!/bin/sh
# catch_discover_tests cuts a test name at ';', and the cut name matches no test: ctest then runs
# nothing for it and reports it passed. Fail when any test name holds one.
dir=${1:?usage: check_test_names.sh TESTS_DIR}
if grep -rnE 'TEST_CASE\("[^"]*;' "$dir" --include='*.cpp'; then
  echo "the test names above contain ';': ctest would silently run nothing for them" >&2
  exit 1
fi
echo "no test name contains ';'"
