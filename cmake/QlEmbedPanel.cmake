# ql_embed_panel(TARGET WEB_DIR)
#
# Adds to TARGET a generated source defining `std::span<const ql::PanelFile>
# ql::EmbeddedPanelFiles()` (src/ql/panel/embedded_panel.h) over every file under WEB_DIR,
# regenerated at build time whenever one of them changes. `index.html` is served at "/" with
# every "@PANEL_PREFIX@" replaced by "/ui/<bundle hash>"; every other file at
# "/ui/<bundle hash>/<relative path>". The bundle hash is the first 16 hex digits of a SHA-256
# over every file's path and content, so any change gives every asset a new URL. Without WEB_DIR
# (QL_PANEL=OFF) the span is empty.
set(QL_EMBED_PANEL_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/QlEmbedPanelFiles.cmake)

function(ql_embed_panel target web_dir)
  set(generated ${CMAKE_CURRENT_BINARY_DIR}/${target}_files.cc)
  set(files "")
  if(web_dir)
    file(GLOB_RECURSE files CONFIGURE_DEPENDS LIST_DIRECTORIES false ${web_dir}/*)
    list(SORT files)
  endif()
  add_custom_command(
    OUTPUT ${generated}
    COMMAND ${CMAKE_COMMAND} -DWEB_DIR=${web_dir} -DOUTPUT=${generated}
            "-DFILES=${files}" -P ${QL_EMBED_PANEL_SCRIPT}
    DEPENDS ${files} ${QL_EMBED_PANEL_SCRIPT}
    COMMENT "Embedding the web panel (${target})"
    VERBATIM)
  target_sources(${target} PRIVATE ${generated})
endfunction()
