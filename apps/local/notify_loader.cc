#include "notify_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ql {

Result<std::unique_ptr<NotificationSender>> LoadNotificationSender(bool allow_loopback) {
  std::string path;
  if (const char* env = std::getenv("QL_NOTIFY_MODULE"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    path = (self.parent_path() / "libql-notify.so").string();
  }
  // Kept open for the life of the process: the sender's code lives there.
  void* module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) {
    const char* why = ::dlerror();
    return Unavailable("notify_module_unavailable",
                       "notifications need " + path + ": " + (why != nullptr ? why : "?"));
  }
  using Create = NotificationSender* (*)(bool);
  auto create = reinterpret_cast<Create>(::dlsym(module, "ql_notify_create_sender"));
  if (create == nullptr) {
    return Unavailable("notify_module_unavailable", path + " has no ql_notify_create_sender");
  }
  return std::unique_ptr<NotificationSender>(create(allow_loopback));
}

}  // namespace ql
