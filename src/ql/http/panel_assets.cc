#include "ql/http/panel_assets.h"

namespace ql {

const PanelFile* PanelAssets::Find(std::string_view path) const {
  for (const PanelFile& file : files_) {
    if (file.path == path) return &file;
  }
  return nullptr;
}

size_t PanelAssets::body_bytes() const {
  size_t total = 0;
  for (const PanelFile& file : files_) total += file.body.size();
  return total;
}

}  // namespace ql
