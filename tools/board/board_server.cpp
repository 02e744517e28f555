#include "tools/board/board_server.h"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/core/error.h"
#include "tools/board/assets.h"
#include "tools/board/run_files.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// Display names: each directory's base name, with its parent's prepended while two collide.
std::vector<std::string> run_names(const std::vector<std::string>& dirs) {
  std::vector<std::string> names;
  for (const std::string& d : dirs) {
    fs::path p = fs::absolute(d).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();
    names.push_back(p.filename().string());
  }
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t j = i + 1; j < names.size(); ++j)
      if (names[i] == names[j]) {
        names[j] += fmt::format(" ({})", j + 1);
      }
  return names;
}

const std::map<std::string, std::string>& asset_routes() {
  static const std::map<std::string, std::string> routes = {
      {"/", "index.html"}, {"/board.js", "board.js"}, {"/board.css", "board.css"}};
  return routes;
}

std::string content_type(const std::string& asset) {
  if (asset.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (asset.ends_with(".css")) return "text/css; charset=utf-8";
  return "text/html; charset=utf-8";
}

}  // namespace

int run_board(const BoardArgs& args) {
  if (args.dirs.empty()) throw Error("[kiln board] expected at least one RUN_DIR");
  for (const std::string& d : args.dirs)
    if (!fs::is_directory(d))
      throw Error("[kiln board] expected run directories (the --out of `kiln train`), but " + d +
                  (fs::exists(d) ? " is not a directory" : " does not exist"));
  const std::vector<std::string> names = run_names(args.dirs);

  httplib::Server server;
  // Debian's cpp-httplib 0.11 sets SO_REUSEPORT on its sockets, so a second board on a port in
  // use would share it silently; SO_REUSEADDR alone still refuses a port someone listens on.
  server.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server.set_payload_max_length(64 * 1024);
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_max_count(100);
  for (const auto& [route, asset] : asset_routes()) {
    server.Get(route, [asset = asset](const httplib::Request&, httplib::Response& res) {
      const std::optional<std::string_view> bytes = board_asset(asset);
      res.set_content(std::string(bytes.value_or("")), content_type(asset));
      res.set_header("Cache-Control", "no-cache");
    });
  }
  server.Get("/api/runs", [&](const httplib::Request&, httplib::Response& res) {
    nlohmann::json runs = nlohmann::json::array();
    for (size_t i = 0; i < args.dirs.size(); ++i) runs.push_back(read_run(args.dirs[i], names[i]));
    res.set_content(runs.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                    "application/json");
    res.set_header("Cache-Control", "no-store");
  });
  const auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("405 method not allowed: the board only answers GET\n", "text/plain");
  };
  server.Post(".*", not_allowed);
  server.Put(".*", not_allowed);
  server.Delete(".*", not_allowed);
  server.Patch(".*", not_allowed);
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      res.set_content("404 not found: " + req.path +
                          " (the board serves /, /board.js, "
                          "/board.css and /api/runs)\n",
                      "text/plain");
    else
      res.set_content(std::to_string(res.status) + "\n", "text/plain");
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content("500 internal error: " + what + "\n", "text/plain");
      });

  // SIGINT / SIGTERM are taken by a thread that stops the server (httplib's stop() is safe to
  // call from another thread, not from a signal handler).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const int port = args.port == 0 ? server.bind_to_any_port(args.host)
                                  : (server.bind_to_port(args.host, args.port) ? args.port : -1);
  if (port < 0)
    throw Error(
        fmt::format("[kiln board] cannot listen on {}:{} (the port is in use, or the host "
                    "is not an address of this machine); choose another with --port",
                    args.host, args.port));
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server.stop();
  });
  std::cout << fmt::format("kiln board: serving {} run(s) at http://{}:{}/ (Ctrl-C to stop)\n",
                           args.dirs.size(), args.host, port)
            << std::flush;
  const bool ok = server.listen_after_bind();
  if (waiter.joinable()) {
    pthread_kill(waiter.native_handle(), SIGTERM);  // wakes sigwait when listen ended by itself
    waiter.join();
  }
  std::cout << "kiln board: stopped\n";
  return ok ? 0 : 1;
}

}  // namespace kiln::cli
