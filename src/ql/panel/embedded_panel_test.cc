#include "ql/panel/embedded_panel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace ql {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

#if QL_PANEL_ENABLED

// The asset prefix "/ui/<16 hex digits>" every embedded asset shares.
std::string AssetPrefix() {
  for (const PanelFile& file : EmbeddedPanelFiles()) {
    if (file.path != "/") return std::string(file.path.substr(0, 20));
  }
  return "";
}

TEST(EmbeddedPanelTest, EmbedsEveryWebFileByteForByte) {
  const std::string prefix = AssetPrefix();
  ASSERT_TRUE(std::regex_match(prefix, std::regex("/ui/[0-9a-f]{16}"))) << prefix;
  const PanelAssets assets(EmbeddedPanelFiles());
  size_t on_disk = 0;
  for (const auto& entry : fs::recursive_directory_iterator(QL_PANEL_WEB_DIR)) {
    if (!entry.is_regular_file()) continue;
    ++on_disk;
    const std::string rel = fs::relative(entry.path(), QL_PANEL_WEB_DIR).generic_string();
    std::string expected = ReadFile(entry.path());
    const PanelFile* file = nullptr;
    if (rel == "index.html") {
      file = assets.Find("/");
      for (size_t at = expected.find("@PANEL_PREFIX@"); at != std::string::npos;
           at = expected.find("@PANEL_PREFIX@", at)) {
        expected.replace(at, 14, prefix);
      }
      ASSERT_NE(file, nullptr);
      EXPECT_FALSE(file->immutable);
    } else {
      file = assets.Find(prefix + "/" + rel);
      ASSERT_NE(file, nullptr) << rel;
      EXPECT_TRUE(file->immutable) << rel;
    }
    EXPECT_EQ(file->body, expected) << rel;
  }
  // The files embedded from outside web/ ("path=file|path=file"), byte for byte too.
  std::stringstream extra(QL_PANEL_EXTRA_FILES);
  for (std::string spec; std::getline(extra, spec, '|');) {
    if (spec.empty()) continue;
    const size_t eq = spec.find('=');
    ASSERT_NE(eq, std::string::npos) << spec;
    ++on_disk;
    const PanelFile* file = assets.Find(prefix + "/" + spec.substr(0, eq));
    ASSERT_NE(file, nullptr) << spec;
    EXPECT_TRUE(file->immutable) << spec;
    EXPECT_EQ(file->body, ReadFile(spec.substr(eq + 1))) << spec;
  }
  EXPECT_EQ(assets.size(), on_disk);
  EXPECT_GT(assets.body_bytes(), 0u);
}

// The QR code generator index.html loads is embedded from Debian's node-qrcode-generator.
TEST(EmbeddedPanelTest, EmbedsTheQrCodeGenerator) {
  const PanelAssets assets(EmbeddedPanelFiles());
  const PanelFile* qr = assets.Find(AssetPrefix() + "/lib/vendor/qrcode.js");
  ASSERT_NE(qr, nullptr);
  EXPECT_EQ(qr->content_type, "text/javascript; charset=utf-8");
  EXPECT_THAT(std::string(qr->body), HasSubstr("var qrcode = function()"));
  EXPECT_THAT(std::string(assets.Find("/")->body),
              HasSubstr("src=\"" + AssetPrefix() + "/lib/vendor/qrcode.js\""));
}

TEST(EmbeddedPanelTest, GivesEachKindItsContentType) {
  for (const PanelFile& file : EmbeddedPanelFiles()) {
    const std::string path(file.path);
    const std::string type(file.content_type);
    if (path == "/") {
      EXPECT_EQ(type, "text/html; charset=utf-8");
    } else if (path.ends_with(".js")) {
      EXPECT_EQ(type, "text/javascript; charset=utf-8") << path;
    } else if (path.ends_with(".css")) {
      EXPECT_EQ(type, "text/css; charset=utf-8") << path;
    } else if (path.ends_with(".svg")) {
      EXPECT_EQ(type, "image/svg+xml") << path;
    }
  }
}

// The page loads only what the CSP allows: scripts and styles from files, nothing inline,
// nothing from another origin, and every asset it names is embedded.
TEST(EmbeddedPanelTest, PageHasNoInlineScriptOrStyleAndNamesOnlyEmbeddedAssets) {
  const PanelAssets assets(EmbeddedPanelFiles());
  const PanelFile* page = assets.Find("/");
  ASSERT_NE(page, nullptr);
  const std::string html(page->body);
  EXPECT_THAT(html, Not(HasSubstr("<style")));
  EXPECT_THAT(html, Not(HasSubstr("style=")));
  EXPECT_THAT(html, Not(HasSubstr("javascript:")));
  EXPECT_THAT(html, Not(HasSubstr("http://")));
  EXPECT_THAT(html, Not(HasSubstr("https://")));
  const std::regex script_tag("<script([^>]*)>");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), script_tag);
       it != std::sregex_iterator(); ++it) {
    EXPECT_THAT((*it)[1].str(), HasSubstr("src=")) << "inline script: " << (*it)[0];
  }
  const std::regex reference("(?:src|href)=\"(/[^\"]*)\"");
  int references = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), reference);
       it != std::sregex_iterator(); ++it, ++references) {
    EXPECT_NE(assets.Find((*it)[1].str()), nullptr) << (*it)[1];
  }
  EXPECT_GE(references, 3);
}

// Every module a script imports (static or dynamic, relative) is embedded, and no script
// uses an HTML or code sink the page's Trusted Types policy would refuse.
TEST(EmbeddedPanelTest, ScriptImportsResolveAndUseNoStringSinks) {
  const PanelAssets assets(EmbeddedPanelFiles());
  const std::regex import_spec(R"((?:from|import)\s*\(?\s*'(\.{1,2}/[^']+)')");
  int imports = 0;
  for (const PanelFile& file : EmbeddedPanelFiles()) {
    const std::string path(file.path);
    if (!path.ends_with(".js")) continue;
    const std::string body(file.body);
    for (const char* sink : {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                             "eval(", "new Function"}) {
      EXPECT_THAT(body, Not(HasSubstr(sink))) << path;
    }
    const fs::path dir = fs::path(path).parent_path();
    for (auto it = std::sregex_iterator(body.begin(), body.end(), import_spec);
         it != std::sregex_iterator(); ++it, ++imports) {
      const std::string target = (dir / (*it)[1].str()).lexically_normal().generic_string();
      EXPECT_NE(assets.Find(target), nullptr) << path << " imports " << (*it)[1];
      EXPECT_THAT(target, StartsWith(AssetPrefix() + "/"));
    }
  }
  EXPECT_GE(imports, 10);
}

// Every text a script looks up by its English words (t('...') or tParts('...')) has a
// Simplified Chinese translation in lib/locales/zh-CN.js, so no label shows in English there.
TEST(EmbeddedPanelTest, EveryLookedUpTextHasAChineseTranslation) {
  const std::string prefix = AssetPrefix();
  std::string dictionary;
  for (const PanelFile& file : EmbeddedPanelFiles()) {
    if (file.path == prefix + "/lib/locales/zh-CN.js") dictionary = std::string(file.body);
  }
  ASSERT_FALSE(dictionary.empty()) << "lib/locales/zh-CN.js is not embedded";
  std::set<std::string> translated;
  const std::regex entry(R"(\n\s*'((?:[^'\\\n]|\\.)*)':)");
  for (auto it = std::sregex_iterator(dictionary.begin(), dictionary.end(), entry);
       it != std::sregex_iterator(); ++it) {
    translated.insert((*it)[1].str());
  }
  EXPECT_GE(translated.size(), 300u);
  const std::regex lookup(R"(\b(?:t|tParts)\(\s*'((?:[^'\\\n]|\\.)*)')");
  int lookups = 0;
  for (const PanelFile& file : EmbeddedPanelFiles()) {
    const std::string path(file.path);
    if (!path.ends_with(".js") || path.find("/lib/locales/") != std::string::npos ||
        path.find("/lib/vendor/") != std::string::npos) {
      continue;
    }
    const std::string body(file.body);
    for (auto it = std::sregex_iterator(body.begin(), body.end(), lookup);
         it != std::sregex_iterator(); ++it, ++lookups) {
      EXPECT_TRUE(translated.contains((*it)[1].str()))
          << path << " looks up a text with no Chinese translation: " << (*it)[1];
    }
  }
  EXPECT_GE(lookups, 300);
}

#else

TEST(EmbeddedPanelTest, BuildWithoutPanelEmbedsNothing) {
  EXPECT_TRUE(EmbeddedPanelFiles().empty());
}

#endif

}  // namespace
}  // namespace ql
