# ql_embed_openapi(TARGET DOCUMENT)
#
# Adds to TARGET a generated source defining `std::string_view ql::http::OpenApiDocument()`
# (src/ql/http/openapi_document.h) over the bytes of DOCUMENT (docs/openapi.json), regenerated at
# build time whenever it changes. The bytes are one constexpr array: read-only data of the
# executable, never copied to the heap.
set(QL_EMBED_OPENAPI_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/QlEmbedOpenApiFile.cmake)

function(ql_embed_openapi target document)
  set(generated ${CMAKE_CURRENT_BINARY_DIR}/${target}_openapi_document.cc)
  add_custom_command(
    OUTPUT ${generated}
    COMMAND ${CMAKE_COMMAND} -DDOCUMENT=${document} -DOUTPUT=${generated}
            -P ${QL_EMBED_OPENAPI_SCRIPT}
    DEPENDS ${document} ${QL_EMBED_OPENAPI_SCRIPT}
    COMMENT "Embedding the OpenAPI document (${target})"
    VERBATIM)
  target_sources(${target} PRIVATE ${generated})
endfunction()
