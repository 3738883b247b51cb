#include "oidc_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ql {

Result<std::unique_ptr<OidcProvider>> LoadOidcProvider(const OidcConfig& config, Clock& clock) {
  std::string path;
  if (const char* env = std::getenv("QL_OIDC_MODULE"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    path = (self.parent_path() / "libql-oidc.so").string();
  }
  // Kept open for the life of the process: the provider's code lives there.
  void* module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) {
    const char* why = ::dlerror();
    return Unavailable("oidc_module_unavailable",
                       "single sign-on needs " + path + ": " + (why != nullptr ? why : "?"));
  }
  using Create = OidcProvider* (*)(const OidcConfig*, Clock*);
  auto create = reinterpret_cast<Create>(::dlsym(module, "ql_oidc_create_provider"));
  if (create == nullptr) {
    return Unavailable("oidc_module_unavailable", path + " has no ql_oidc_create_provider");
  }
  return std::unique_ptr<OidcProvider>(create(&config, &clock));
}

}  // namespace ql
