// Child processes for the messaging fault tests (tests/messaging/msg_test_proc).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "messaging/zmq_util.h"

#ifndef UPDRAFT_MSG_TEST_PROC
#error "UPDRAFT_MSG_TEST_PROC must name the helper executable"
#endif

namespace updraft::messaging::testing {

using namespace std::chrono_literals;

// A child process running msg_test_proc; killed with SIGKILL if still alive at destruction.
class Proc {
 public:
  explicit Proc(std::vector<std::string> args) {
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      static std::string exe = UPDRAFT_MSG_TEST_PROC;
      argv.push_back(exe.data());
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(exe.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Proc() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::kill(pid_, SIGCONT);
      wait(60s);
    }
  }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;
  pid_t pid() const { return pid_; }
  void kill(int sig) { ::kill(pid_, sig); }
  // Exit status (or -signal), or nullopt if still running after the limit.
  std::optional<int> wait(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() >= end)
        return std::nullopt;
      std::this_thread::sleep_for(10ms);
    }
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
};

// A loopback tcp endpoint with a port that was free a moment ago.
inline std::string free_tcp_endpoint() {
  ZmqContext ctx;
  ZmqSocket s(ctx.get(), ZMQ_ROUTER);
  s.bind("tcp://127.0.0.1:*");
  return s.last_endpoint();
}

}  // namespace updraft::messaging::testing
