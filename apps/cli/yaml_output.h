#pragma once

// YAML for `ql --output yaml`: the same document `--json` prints, in YAML's block style, so a
// person can read it and a YAML tool can load it. Strings are written plain when YAML would read
// them back as the same string, and double-quoted (JSON's escapes, which YAML shares) otherwise.

#include <nlohmann/json.hpp>
#include <string>

namespace ql::cli {

// Returns `value` as a YAML document ending with a newline.
std::string YamlOutput(const nlohmann::json& value);

}  // namespace ql::cli
