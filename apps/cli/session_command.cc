#include "session_command.h"

#include <httplib.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "client.h"
#include "output.h"
#include "ql/secrets/sealed_box.h"

namespace ql::cli {
namespace {

using nlohmann::json;

// Reads one line from the terminal without echo, after printing `prompt` on it.
CliResult<std::string> ReadSecretFromTerminal(const std::string& prompt) {
  FILE* tty = std::fopen("/dev/tty", "r+");
  if (tty == nullptr) {
    return CliError::Usage("no_terminal",
                           "no terminal to read the password from; pass --password-stdin");
  }
  std::fputs(prompt.c_str(), tty);
  std::fflush(tty);
  termios saved{};
  const bool is_tty = ::tcgetattr(fileno(tty), &saved) == 0;
  if (is_tty) {
    termios quiet = saved;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(fileno(tty), TCSAFLUSH, &quiet);
  }
  char buffer[1024];
  const bool got = std::fgets(buffer, sizeof buffer, tty) != nullptr;
  if (is_tty) ::tcsetattr(fileno(tty), TCSAFLUSH, &saved);
  std::fputs("\n", tty);
  std::fclose(tty);
  if (!got) return CliError::Usage("no_password", "no password was entered");
  std::string line(buffer);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

// Reads the next line of standard input (without its line end); nullopt at the end.
std::optional<std::string> ReadStdinLine() {
  std::string line;
  if (!std::getline(std::cin, line)) return std::nullopt;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

// A new password from stdin (one line) or the terminal (asked twice).
CliResult<std::string> NewPassword(bool from_stdin, const std::string& whose) {
  if (from_stdin) {
    std::optional<std::string> line = ReadStdinLine();
    if (!line || line->empty()) {
      return CliError::Usage("no_password", "standard input holds no password line");
    }
    return *line;
  }
  CliResult<std::string> first = ReadSecretFromTerminal("New password for " + whose + ": ");
  if (!first.ok()) return first;
  CliResult<std::string> second = ReadSecretFromTerminal("Repeat it: ");
  if (!second.ok()) return second;
  if (*first != *second) {
    return CliError::Usage("password_mismatch", "the two passwords differ; nothing changed");
  }
  return first;
}

// Writes `text` to `path` readable by its owner only, creating its directory (0700).
CliResult<bool> WritePrivateFile(const std::string& path, const std::string& text) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos) {
    std::string dir;
    for (size_t at = 1; at <= slash; ++at) {
      if (path[at] == '/' || at == slash) {
        dir = path.substr(0, at == slash ? slash : at);
        if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
          return CliError::Failure("credentials_unwritable",
                                   "cannot create " + dir + ": " + std::strerror(errno));
        }
      }
    }
  }
  const std::string temporary = path + ".tmp";
  {
    const mode_t old = ::umask(077);
    std::ofstream out(temporary, std::ios::trunc);
    ::umask(old);
    out << text;
    if (!out.good()) {
      return CliError::Failure("credentials_unwritable", "cannot write " + temporary);
    }
  }
  ::chmod(temporary.c_str(), 0600);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return CliError::Failure("credentials_unwritable",
                             "cannot write " + path + ": " + std::strerror(errno));
  }
  return true;
}

// Keeps the session a sign-in (or the set-up) answered with in the credentials file and says
// so.
int KeepSession(CommandContext& context, ApiClient& api, const json& answer,
                const std::string& principal) {
  const std::string path = CredentialsPath(context.env());
  if (path.empty()) {
    return context.Fail(CliError::Usage(
        "credentials_unwritable", "neither HOME nor XDG_CONFIG_HOME is set to keep the session"));
  }
  const json session = answer.value("session", json::object());
  json saved{{"server", api.connection().server.url},
             {"token", answer.value("token", "")},
             {"principal", principal},
             {"expires_at", JsonText(session, "expires_at")},
             {"ca_file", api.connection().tls.ca_file}};
  CliResult<bool> written = WritePrivateFile(path, saved.dump(2) + "\n");
  if (!written.ok()) return context.Fail(written.error());
  const std::string restriction =
      answer.contains("restriction") && answer["restriction"].is_string()
          ? answer["restriction"].get<std::string>()
          : std::string();
  if (context.json()) {
    context.out() << JsonOutput(json{
                         {"server", saved["server"]},
                         {"principal", principal},
                         {"expires_at", saved["expires_at"]},
                         {"credentials", path},
                         {"must_change_password", answer.value("must_change_password", false)},
                         {"restriction", restriction.empty() ? json(nullptr) : json(restriction)}})
                  << "\n";
  } else {
    context.out() << "signed in to " << saved["server"].get<std::string>() << " as " << principal
                  << " until " << saved["expires_at"].get<std::string>() << " (kept in " << path
                  << ")\n";
    if (restriction == "password_change" || answer.value("must_change_password", false)) {
      context.out() << "your password must be changed before anything else: run ql passwd\n";
    } else if (restriction == "totp_enrolment") {
      context.out() << "this installation requires a second factor: run ql totp enrol, then "
                       "ql totp confirm CODE\n";
    }
  }
  return kExitOk;
}

// ql login --oidc: a loopback listener on a free port waits for the browser's last redirect,
// which carries the session token sealed to a key pair made for this sign-in (only this process
// can open it), or the reason the sign-in failed.
int LoginThroughProvider(CommandContext& context, ApiClient& api, int timeout_s) {
  Result<secrets::BoxKeyPair> keys = secrets::NewBoxKeyPair();
  if (!keys.ok()) return context.Fail(CliError::Failure("internal", keys.status().message()));
  std::mutex mu;
  std::condition_variable answered;
  std::optional<std::string> sealed;
  std::optional<std::string> error;
  httplib::Server listener;
  listener.Get("/callback", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    if (sealed.has_value() || error.has_value()) {
      res.status = 409;
      res.set_content("This sign-in has finished.\n", "text/plain");
      return;
    }
    if (req.has_param("sealed")) {
      sealed = req.get_param_value("sealed");
      res.set_content("Signed in. You can close this tab and go back to the terminal.\n",
                      "text/plain");
    } else {
      error = req.has_param("error") ? req.get_param_value("error") : std::string("oidc_failed");
      res.status = 400;
      res.set_content("Signing in did not succeed (" + *error + "). See the terminal.\n",
                      "text/plain");
    }
    answered.notify_all();
  });
  const int port = listener.bind_to_any_port("127.0.0.1");
  if (port <= 0) {
    return context.Fail(CliError::Failure("listen_failed", "cannot listen on a loopback port"));
  }
  std::thread serving([&] { listener.listen_after_bind(); });
  const std::string url = api.connection().server.url +
                          "/api/v1/sign-in/oidc?client=cli&port=" + std::to_string(port) +
                          "&key=" + keys->public_key;
  std::cerr << "Open this address in a browser to sign in (waiting up to " << timeout_s
            << " s):\n  " << url << "\n"
            << std::flush;
  {
    std::unique_lock<std::mutex> lock(mu);
    answered.wait_for(lock, std::chrono::seconds(timeout_s),
                      [&] { return sealed.has_value() || error.has_value(); });
  }
  listener.stop();
  serving.join();
  if (error.has_value()) {
    return context.Fail(CliError::Failure(*error, "the single sign-on did not succeed: " + *error));
  }
  if (!sealed.has_value()) {
    return context.Fail(CliError::Failure(
        "oidc_timeout", "no answer from the browser within " + std::to_string(timeout_s) + " s"));
  }
  Result<std::string> token = secrets::OpenSealedBox(*keys, *sealed);
  if (!token.ok()) {
    return context.Fail(CliError::Failure(token.status().reason(), token.status().message()));
  }
  // Who the provider signed in, and until when: asked with the new token itself.
  Connection connection = api.connection();
  connection.token = *token;
  ApiClient signed_in(connection);
  CliResult<json> who = signed_in.GetJson("/api/v1/whoami");
  if (!who.ok()) return context.Fail(who.error());
  const json session = who->value("session", json::object());
  json answer{{"token", *token},
              {"session", json{{"expires_at", session.value("expires_at", json(nullptr))}}},
              {"restriction", session.value("restriction", json(nullptr))}};
  return KeepSession(context, api, answer,
                     who->value("principal", json::object()).value("name", std::string()));
}

}  // namespace

void RegisterSessionCommands(CLI::App& app, CLI::App& principal) {
  // ql setup: the owner's first password, with the code ql-local printed at first start.
  struct SetupArgs {
    std::string code;
    bool password_stdin = false;
  };
  auto setup_args = std::make_shared<SetupArgs>();
  CLI::App* setup = app.add_subcommand(
      "setup",
      "Choose the installation owner's first password with the one-time set-up code "
      "(data/setup.code) and keep a session like ql login");
  setup->fallthrough();
  setup->add_option("--code", setup_args->code, "The set-up code (from data/setup.code)")
      ->required();
  setup->add_flag("--password-stdin", setup_args->password_stdin,
                  "Read the new password from the first line of standard input");
  setup->callback([setup, setup_args] {
    RunCommand(*setup, [&](CommandContext& context) {
      CliResult<ApiClient*> api = context.ApiWithoutToken();
      if (!api.ok()) return context.Fail(api.error());
      CliResult<std::string> password = NewPassword(setup_args->password_stdin, "owner");
      if (!password.ok()) return context.Fail(password.error());
      CliResult<json> answer = (*api)->PostJson(
          "/api/v1/setup",
          json{{"code", setup_args->code}, {"password", *password}, {"client", "cli"}});
      if (!answer.ok()) return context.Fail(answer.error());
      return KeepSession(
          context, **api, *answer,
          answer->value("principal", json::object()).value("name", std::string("owner")));
    });
  });

  // ql login
  struct LoginArgs {
    std::string user;
    bool password_stdin = false;
    std::string totp;
    bool oidc = false;
    int oidc_timeout_s = 300;
  };
  auto login_args = std::make_shared<LoginArgs>();
  CLI::App* login = app.add_subcommand(
      "login", "Sign in with a password and keep an expiring session for ql (0600 file)");
  login->fallthrough();
  login->add_option("--user,-u", login_args->user, "Principal name (password sign-in)");
  login->add_flag("--oidc", login_args->oidc,
                  "Sign in through the server's single sign-on provider in a browser: ql prints "
                  "an address to open and waits on a loopback port for the answer");
  login->add_option("--oidc-timeout", login_args->oidc_timeout_s,
                    "Seconds to wait for the browser sign-in (default 300)");
  login->add_flag("--password-stdin", login_args->password_stdin,
                  "Read the password from the first line of standard input");
  login->add_option("--totp", login_args->totp, "A one-time code of the second factor");
  login->callback([login, login_args] {
    RunCommand(*login, [&](CommandContext& context) {
      CliResult<ApiClient*> api = context.ApiWithoutToken();
      if (!api.ok()) return context.Fail(api.error());
      if (login_args->oidc) {
        if (!login_args->user.empty() || login_args->password_stdin || !login_args->totp.empty()) {
          return context.Fail(
              CliError::Usage("invalid_arguments",
                              "--oidc signs in at the provider: no --user, password or --totp"));
        }
        return LoginThroughProvider(context, **api, login_args->oidc_timeout_s);
      }
      if (login_args->user.empty()) {
        return context.Fail(CliError::Usage("missing_user", "--user NAME is required (or --oidc)"));
      }
      std::string password;
      if (login_args->password_stdin) {
        std::optional<std::string> line = ReadStdinLine();
        if (!line) {
          return context.Fail(
              CliError::Usage("no_password", "standard input holds no password line"));
        }
        password = *line;
      } else {
        CliResult<std::string> typed = ReadSecretFromTerminal(
            "Password for " + login_args->user + " at " + (*api)->connection().server.url + ": ");
        if (!typed.ok()) return context.Fail(typed.error());
        password = *typed;
      }
      json body{{"name", login_args->user}, {"password", password}, {"client", "cli"}};
      if (!login_args->totp.empty()) body["totp"] = login_args->totp;
      CliResult<json> answer = (*api)->PostJson("/api/v1/sign-in", body);
      if (!answer.ok()) return context.Fail(answer.error());
      return KeepSession(context, **api, *answer, login_args->user);
    });
  });

  // ql logout
  CLI::App* logout = app.add_subcommand("logout", "End the session ql login kept");
  logout->fallthrough();
  logout->callback([logout] {
    RunCommand(*logout, [](CommandContext& context) {
      const std::string path = CredentialsPath(context.env());
      if (!LoadCredentials(path).has_value()) {
        return context.Fail(CliError::Usage("not_signed_in", "no session kept by ql login"));
      }
      CliResult<ApiClient*> api = context.Api();
      bool ended = false;
      if (api.ok()) {
        CliResult<json> answer = (*api)->PostJson("/api/v1/sign-out", json::object());
        ended = answer.ok();
      }
      std::remove(path.c_str());
      context.out() << (ended ? "signed out; " : "the server could not be told; ") << "removed "
                    << path << "\n";
      return kExitOk;
    });
  });

  // ql passwd
  auto passwd_stdin = std::make_shared<bool>(false);
  CLI::App* passwd = app.add_subcommand("passwd", "Change your own password");
  passwd->fallthrough();
  passwd->add_flag("--password-stdin", *passwd_stdin,
                   "Read the current password and then the new one from two lines of standard "
                   "input (one line: the new password, for a first password)");
  passwd->callback([passwd, passwd_stdin] {
    RunCommand(*passwd, [&](CommandContext& context) {
      CliResult<ApiClient*> api = context.Api();
      if (!api.ok()) return context.Fail(api.error());
      std::string current;
      std::string replacement;
      if (*passwd_stdin) {
        std::optional<std::string> first = ReadStdinLine();
        std::optional<std::string> second = ReadStdinLine();
        if (!first) {
          return context.Fail(CliError::Usage("no_password", "standard input holds no password"));
        }
        if (second) {
          current = *first;
          replacement = *second;
        } else {
          replacement = *first;
        }
      } else {
        CliResult<std::string> typed =
            ReadSecretFromTerminal("Current password (empty if you have none): ");
        if (!typed.ok()) return context.Fail(typed.error());
        current = *typed;
        CliResult<std::string> fresh = NewPassword(false, "you");
        if (!fresh.ok()) return context.Fail(fresh.error());
        replacement = *fresh;
      }
      CliResult<json> answer = (*api)->PostJson(
          "/api/v1/password", json{{"current_password", current}, {"new_password", replacement}});
      if (!answer.ok()) return context.Fail(answer.error());
      context.out() << "password changed; your other sessions have ended\n";
      return kExitOk;
    });
  });

  // ql principal passwd NAME
  struct ResetArgs {
    std::string name;
    bool password_stdin = false;
    bool require_change = false;
    bool remove = false;
  };
  auto reset_args = std::make_shared<ResetArgs>();
  CLI::App* reset = principal.add_subcommand(
      "passwd", "Set another principal's password (installation admin); its sessions end");
  reset->fallthrough();
  reset->add_option("name", reset_args->name, "Principal name or id")->required();
  reset->add_flag("--password-stdin", reset_args->password_stdin,
                  "Read the new password from the first line of standard input");
  reset->add_flag("--require-change", reset_args->require_change,
                  "The next sign-in must choose a new password");
  reset->add_flag("--remove", reset_args->remove,
                  "Remove the password (and second factor): no password sign-in any more");
  reset->callback([reset, reset_args] {
    RunCommand(*reset, [&](CommandContext& context) {
      CliResult<ApiClient*> api = context.Api();
      if (!api.ok()) return context.Fail(api.error());
      if (reset_args->remove) {
        if (reset_args->password_stdin || reset_args->require_change) {
          return context.Fail(CliError::Usage(
              "invalid_arguments", "--remove takes no --password-stdin or --require-change"));
        }
        CliResult<json> removed =
            (*api)->DeleteJson("/api/v1/principals/" + UrlEncode(reset_args->name) + "/password");
        if (!removed.ok()) return context.Fail(removed.error());
        context.out() << "password of " << reset_args->name
                      << " removed; its sessions have ended\n";
        return kExitOk;
      }
      CliResult<std::string> fresh = NewPassword(reset_args->password_stdin, reset_args->name);
      if (!fresh.ok()) return context.Fail(fresh.error());
      CliResult<json> answer = (*api)->PostJson(
          "/api/v1/principals/" + UrlEncode(reset_args->name) + "/password",
          json{{"new_password", *fresh}, {"require_change", reset_args->require_change}});
      if (!answer.ok()) return context.Fail(answer.error());
      context.out() << "password of " << reset_args->name << " set"
                    << (reset_args->require_change ? " (to be changed at the next sign-in)" : "")
                    << "; its sessions have ended\n";
      return kExitOk;
    });
  });

  // ql totp enrol|confirm|disable
  CLI::App* totp = app.add_subcommand("totp", "Set up or remove a second factor (TOTP)");
  totp->require_subcommand(1);
  CLI::App* enrol = totp->add_subcommand(
      "enrol", "Start: prints a secret and an otpauth:// URI for your authenticator app");
  enrol->fallthrough();
  enrol->callback([enrol] {
    RunCommand(*enrol, [](CommandContext& context) {
      CliResult<ApiClient*> api = context.Api();
      if (!api.ok()) return context.Fail(api.error());
      CliResult<json> answer = (*api)->PostJson("/api/v1/totp/enrol", json::object());
      if (!answer.ok()) return context.Fail(answer.error());
      if (context.json()) {
        context.out() << JsonOutput(*answer) << "\n";
        return kExitOk;
      }
      context.out() << "secret: " << JsonText(*answer, "secret") << "\n"
                    << "uri:    " << JsonText(*answer, "otpauth_uri") << "\n"
                    << "add it to your authenticator, then: ql totp confirm CODE\n";
      return kExitOk;
    });
  });
  auto confirm_code = std::make_shared<std::string>();
  CLI::App* confirm = totp->add_subcommand(
      "confirm", "Finish with a current code: prints ten one-time recovery codes, once");
  confirm->fallthrough();
  confirm->add_option("code", *confirm_code, "The 6-digit code the authenticator shows")
      ->required();
  confirm->callback([confirm, confirm_code] {
    RunCommand(*confirm, [&](CommandContext& context) {
      CliResult<ApiClient*> api = context.Api();
      if (!api.ok()) return context.Fail(api.error());
      CliResult<json> answer =
          (*api)->PostJson("/api/v1/totp/confirm", json{{"code", *confirm_code}});
      if (!answer.ok()) return context.Fail(answer.error());
      if (context.json()) {
        context.out() << JsonOutput(*answer) << "\n";
        return kExitOk;
      }
      context.out() << "second factor on; keep these recovery codes (each works once):\n";
      for (const json& code : answer->value("recovery_codes", json::array())) {
        context.out() << "  " << code.get<std::string>() << "\n";
      }
      return kExitOk;
    });
  });
  auto disable_stdin = std::make_shared<bool>(false);
  CLI::App* disable = totp->add_subcommand("disable", "Remove your second factor");
  disable->fallthrough();
  disable->add_flag("--password-stdin", *disable_stdin,
                    "Read your password from the first line of standard input");
  disable->callback([disable, disable_stdin] {
    RunCommand(*disable, [&](CommandContext& context) {
      CliResult<ApiClient*> api = context.Api();
      if (!api.ok()) return context.Fail(api.error());
      std::string password;
      if (*disable_stdin) {
        password = ReadStdinLine().value_or("");
      } else {
        CliResult<std::string> typed = ReadSecretFromTerminal("Your password: ");
        if (!typed.ok()) return context.Fail(typed.error());
        password = *typed;
      }
      CliResult<json> answer =
          (*api)->PostJson("/api/v1/totp/disable", json{{"current_password", password}});
      if (!answer.ok()) return context.Fail(answer.error());
      context.out() << "second factor removed\n";
      return kExitOk;
    });
  });

  // ql session list|revoke
  CLI::App* session = app.add_subcommand("session", "List and end sign-in sessions");
  session->require_subcommand(1);
  auto list_principal = std::make_shared<std::string>();
  CLI::App* list = session->add_subcommand("list", "List live sessions (yours, or a principal's)");
  list->fallthrough();
  list->add_option("--principal", *list_principal, "Another principal's (installation admin)");
  list->callback([list, list_principal] {
    RunCommand(*list, [&](CommandContext& context) {
      CliResult<ApiClient*> api = context.Api();
      if (!api.ok()) return context.Fail(api.error());
      CliResult<json> answer =
          (*api)->GetJson(WithQuery("/api/v1/sessions", {{"principal", *list_principal}}));
      if (!answer.ok()) return context.Fail(answer.error());
      if (context.json()) {
        context.out() << JsonOutput(*answer) << "\n";
        return kExitOk;
      }
      Table table({"ID", "FROM", "CREATED", "LAST USED", "EXPIRES", ""});
      for (const json& s : answer->value("items", json::array())) {
        table.AddRow({JsonText(s, "id"), JsonText(s, "label"), JsonText(s, "created_at"),
                      JsonText(s, "last_used_at"), JsonText(s, "expires_at"),
                      s.value("current", false) ? "(this one)" : ""});
      }
      table.Print(context.out());
      return kExitOk;
    });
  });
  auto revoke_id = std::make_shared<std::string>();
  CLI::App* revoke = session->add_subcommand("revoke", "End a session");
  revoke->fallthrough();
  revoke->add_option("id", *revoke_id, "Session id (ql session list)")->required();
  revoke->callback([revoke, revoke_id] {
    RunCommand(*revoke, [&](CommandContext& context) {
      CliResult<ApiClient*> api = context.Api();
      if (!api.ok()) return context.Fail(api.error());
      CliResult<json> answer =
          (*api)->PostJson("/api/v1/sessions/" + UrlEncode(*revoke_id) + "/revoke", json::object());
      if (!answer.ok()) return context.Fail(answer.error());
      context.out() << "session " << *revoke_id << " ended\n";
      return kExitOk;
    });
  });
}

}  // namespace ql::cli
