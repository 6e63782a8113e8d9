// Asking sentinels where the engine is (cluster/sentinel.h), against a real
// redis-sentinel the test starts on a free port of 127.0.0.1: it monitors a
// master that need not run (a sentinel names the configured address until a
// failover), so none is started. The sentinels are asked in order, a missing
// one is passed over, a name no sentinel knows is an error naming each.
// REDIS_SENTINEL_BIN overrides /usr/bin/redis-sentinel; without it the test
// fails and says what to install.
#include <doctest/doctest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "cluster/sentinel.h"

using namespace concert;
using namespace concert::cluster;

namespace {

// A loopback port nothing listens on (the kernel's pick, closed again).
uint16_t freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  close(fd);
  return ntohs(addr.sin_port);
}

// One redis-sentinel monitoring `name` at 127.0.0.1:master_port, stopped by
// its pid at the end, its directory removed.
class Sentinel {
 public:
  Sentinel(const std::string& name, uint16_t master_port) : port_(freePort()) {
    const char* bin = getenv("REDIS_SENTINEL_BIN");
    const std::string sentinel = bin && *bin ? bin : "/usr/bin/redis-sentinel";
    if (access(sentinel.c_str(), X_OK) != 0)
      throw std::runtime_error(sentinel +
                               " is missing: the sentinel tests need redis-sentinel (apt-get install redis-sentinel)");
    char dir[] = "/tmp/concert-sentinel-XXXXXX";
    if (!mkdtemp(dir)) throw std::runtime_error("mkdtemp failed");
    dir_ = dir;
    const std::string conf = dir_ + "/sentinel.conf";
    std::ofstream(conf) << "port " << port_ << "\nbind 127.0.0.1\ndaemonize no\ndir " << dir_ << "\nlogfile "
                        << dir_ << "/sentinel.log\nsentinel resolve-hostnames no\nsentinel monitor " << name
                        << " 127.0.0.1 " << master_port << " 2\n";
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      execl(sentinel.c_str(), sentinel.c_str(), conf.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 500; ++i) {
      redisContext* c = redisConnect("127.0.0.1", port_);
      const bool up = c && !c->err;
      if (c) redisFree(c);
      if (up) return;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("redis-sentinel exited at start");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    throw std::runtime_error("redis-sentinel did not come up");
  }
  ~Sentinel() { stop(); }
  Sentinel(const Sentinel&) = delete;
  Sentinel& operator=(const Sentinel&) = delete;

  config::ClusterEndpoint endpoint() const { return {"127.0.0.1", port_}; }

 private:
  void stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  uint16_t port_;
  std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace

TEST_CASE("askSentinels: the first sentinel that answers names the master; the others are passed over") {
  const uint16_t master_port = freePort();
  Sentinel sentinel("shop", master_port);
  const config::ClusterEndpoint nobody{"127.0.0.1", freePort()};

  SentinelAnswer answer = askSentinels({sentinel.endpoint()}, "shop", 250);
  REQUIRE_MESSAGE(answer.ok, answer.error);
  CHECK(answer.host == "127.0.0.1");
  CHECK(answer.port == master_port);

  // A sentinel that is not there, then one that is.
  answer = askSentinels({nobody, sentinel.endpoint()}, "shop", 250);
  REQUIRE_MESSAGE(answer.ok, answer.error);
  CHECK(answer.port == master_port);

  // A name no sentinel knows: an error that says what each one did.
  answer = askSentinels({nobody, sentinel.endpoint()}, "other", 250);
  CHECK_FALSE(answer.ok);
  CHECK(answer.error.find("sentinel " + endpointText(nobody.host, nobody.port) + ": ") != std::string::npos);
  CHECK(answer.error.find("sentinel " + endpointText("127.0.0.1", sentinel.endpoint().port) +
                          ": does not know other") != std::string::npos);

  CHECK_FALSE(askSentinels({}, "shop", 250).ok);
}

TEST_CASE("endpointText: host:port, an IPv6 address in brackets") {
  CHECK(endpointText("10.0.0.5", 26379) == "10.0.0.5:26379");
  CHECK(endpointText("::1", 6379) == "[::1]:6379");
}
