# Finds cmark-gfm, GitHub's CommonMark parser with its extensions (Debian: libcmark-gfm-dev), which
# ships a pkg-config file but no CMake package. Defines CmarkGfm::cmark-gfm (the parser and its
# extensions library: tables, strikethrough, autolinks, task lists) and CmarkGfm_VERSION.
find_path(CmarkGfm_INCLUDE_DIR NAMES cmark-gfm.h)
find_path(CmarkGfm_EXTENSIONS_INCLUDE_DIR NAMES cmark-gfm-core-extensions.h)
find_library(CmarkGfm_LIBRARY NAMES cmark-gfm)
find_library(CmarkGfm_EXTENSIONS_LIBRARY NAMES cmark-gfm-extensions)
if(CmarkGfm_INCLUDE_DIR AND EXISTS "${CmarkGfm_INCLUDE_DIR}/cmark-gfm_version.h")
  file(STRINGS "${CmarkGfm_INCLUDE_DIR}/cmark-gfm_version.h" _cmark_ver REGEX "^#define CMARK_GFM_VERSION_STRING")
  string(REGEX REPLACE "^#define CMARK_GFM_VERSION_STRING \"([0-9]+\\.[0-9]+\\.[0-9]+).*" "\\1" CmarkGfm_VERSION "${_cmark_ver}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CmarkGfm
  REQUIRED_VARS CmarkGfm_LIBRARY CmarkGfm_EXTENSIONS_LIBRARY CmarkGfm_INCLUDE_DIR CmarkGfm_EXTENSIONS_INCLUDE_DIR
  VERSION_VAR CmarkGfm_VERSION)
if(CmarkGfm_FOUND AND NOT TARGET CmarkGfm::cmark-gfm)
  add_library(CmarkGfm::core UNKNOWN IMPORTED)
  set_target_properties(CmarkGfm::core PROPERTIES
    IMPORTED_LOCATION "${CmarkGfm_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CmarkGfm_INCLUDE_DIR}")
  add_library(CmarkGfm::cmark-gfm UNKNOWN IMPORTED)
  set_target_properties(CmarkGfm::cmark-gfm PROPERTIES
    IMPORTED_LOCATION "${CmarkGfm_EXTENSIONS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CmarkGfm_EXTENSIONS_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES CmarkGfm::core)
endif()
mark_as_advanced(CmarkGfm_INCLUDE_DIR CmarkGfm_EXTENSIONS_INCLUDE_DIR CmarkGfm_LIBRARY CmarkGfm_EXTENSIONS_LIBRARY)
