#pragma once

// The web panel's files, embedded in the binary at build time from src/ql/panel/web
// (cmake/QlEmbedPanel.cmake; README.md beside this file).

#include <span>

#include "ql/http/panel_assets.h"

namespace ql {

// Returns every file of the panel: "/" (index.html) and the assets under "/ui/<bundle hash>/".
// Empty when the build has QL_PANEL=OFF.
std::span<const PanelFile> EmbeddedPanelFiles();

}  // namespace ql
