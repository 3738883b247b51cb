# ql_embed_panel(TARGET WEB_DIR [EXTRA <path> <file> ...])
#
# Adds to TARGET a generated source defining `std::span<const ql::PanelFile>
# ql::EmbeddedPanelFiles()` (src/ql/panel/embedded_panel.h) over every file under WEB_DIR,
# regenerated at build time whenever one of them changes. `index.html` is served at "/" with
# every "@PANEL_PREFIX@" replaced by "/ui/<bundle hash>"; every other file at
# "/ui/<bundle hash>/<relative path>". The bundle hash is the first 16 hex digits of a SHA-256
# over every file's path and content, so any change gives every asset a new URL. Without WEB_DIR
# (QL_PANEL=OFF) the span is empty.
#
# EXTRA embeds files from outside WEB_DIR (a library a Debian package installs, say), each pair
# a relative path under the prefix and the file's absolute path: `EXTRA lib/vendor/x.js
# /usr/share/.../x.js`. They are embedded byte for byte like the others and take part in the
# bundle hash. A missing file stops the configuration (and the build, if it goes afterwards).
set(QL_EMBED_PANEL_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/QlEmbedPanelFiles.cmake)

function(ql_embed_panel target web_dir)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "" "EXTRA")
  set(generated ${CMAKE_CURRENT_BINARY_DIR}/${target}_files.cc)
  set(files "")
  set(extra_paths "")
  set(extra_files "")
  if(web_dir)
    file(GLOB_RECURSE files CONFIGURE_DEPENDS LIST_DIRECTORIES false ${web_dir}/*)
    list(SORT files)
    list(LENGTH arg_EXTRA extra_count)
    math(EXPR odd "${extra_count} % 2")
    if(odd)
      message(FATAL_ERROR "ql_embed_panel(${target}): EXTRA takes pairs of <path> <file>")
    endif()
    while(arg_EXTRA)
      list(POP_FRONT arg_EXTRA rel source)
      if(NOT EXISTS "${source}" OR IS_DIRECTORY "${source}")
        message(FATAL_ERROR "ql_embed_panel(${target}): ${source} (to be served as ${rel}) "
                            "is missing")
      endif()
      if(rel MATCHES "^/|(^|/)\\.\\.(/|$)" OR rel STREQUAL "index.html")
        message(FATAL_ERROR "ql_embed_panel(${target}): ${rel} is not a path for an extra file")
      endif()
      if(EXISTS "${web_dir}/${rel}")
        message(FATAL_ERROR "ql_embed_panel(${target}): ${rel} is in ${web_dir} already")
      endif()
      list(APPEND extra_paths "${rel}")
      list(APPEND extra_files "${source}")
    endwhile()
  endif()
  add_custom_command(
    OUTPUT ${generated}
    COMMAND ${CMAKE_COMMAND} -DWEB_DIR=${web_dir} -DOUTPUT=${generated}
            "-DFILES=${files}" "-DEXTRA_PATHS=${extra_paths}" "-DEXTRA_FILES=${extra_files}"
            -P ${QL_EMBED_PANEL_SCRIPT}
    DEPENDS ${files} ${extra_files} ${QL_EMBED_PANEL_SCRIPT}
    COMMENT "Embedding the web panel (${target})"
    VERBATIM)
  target_sources(${target} PRIVATE ${generated})
endfunction()
