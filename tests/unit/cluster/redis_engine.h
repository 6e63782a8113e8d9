// A throwaway redis-server for the scripts' unit tests: started by the
// test on a unix socket in a temporary directory (no persistence), spoken to
// with hiredis, stopped by its pid at the end. REDIS_SERVER_BIN overrides
// /usr/bin/redis-server.
#pragma once

#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cluster/engine.h"

namespace concert::cluster::testing {

class RedisEngine {
 public:
  RedisEngine() {
    const char* bin = getenv("REDIS_SERVER_BIN");
    const std::string server = bin && *bin ? bin : "/usr/bin/redis-server";
    if (access(server.c_str(), X_OK) != 0)
      throw std::runtime_error(server + " is missing: the scripts' tests need redis-server (apt-get install redis-server)");
    char dir[] = "/tmp/concert-engine-XXXXXX";
    if (!mkdtemp(dir)) throw std::runtime_error("mkdtemp failed");
    dir_ = dir;
    socket_ = dir_ + "/redis.sock";
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const std::string log = dir_ + "/redis.log";
      execl(server.c_str(), server.c_str(), "--port", "0", "--unixsocket", socket_.c_str(), "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", dir_.c_str(), "--logfile", log.c_str(), "--daemonize", "no",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 500 && !ctx_; ++i) {
      redisContext* c = redisConnectUnix(socket_.c_str());
      if (c && !c->err) {
        ctx_ = c;
        break;
      }
      if (c) redisFree(c);
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("redis-server exited at start");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!ctx_) {
      stop();
      throw std::runtime_error("redis-server did not come up on " + socket_);
    }
  }

  ~RedisEngine() { stop(); }
  RedisEngine(const RedisEngine&) = delete;
  RedisEngine& operator=(const RedisEngine&) = delete;

  Reply command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.c_str());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    Reply out = convertReply(r);
    if (r) freeReplyObject(r);
    return out;
  }

  // A script by its text (EVAL), as the agent runs it when the engine does not know it.
  Reply eval(const char* script, const std::vector<std::string>& keys, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"EVAL", script, std::to_string(keys.size())};
    argv.insert(argv.end(), keys.begin(), keys.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return command(argv);
  }

 private:
  void stop() {
    if (ctx_) redisFree(ctx_);
    ctx_ = nullptr;
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 500; ++i) {
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (pid_ > 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
      }
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }

  std::string dir_;
  std::string socket_;
  pid_t pid_ = -1;
  redisContext* ctx_ = nullptr;
};

// Reading answers.
inline int64_t num(const Reply& r) {
  if (r.type == Reply::Type::Integer) return r.integer;
  if (r.type == Reply::Type::String) return std::stoll(r.str);
  throw std::runtime_error("not a number: " + r.str);
}

inline std::vector<std::string> strings(const Reply& r) {
  std::vector<std::string> out;
  for (const Reply& e : r.elements) out.push_back(e.str);
  return out;
}

inline void sleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace concert::cluster::testing
