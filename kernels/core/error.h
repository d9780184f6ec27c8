// updraft's one error model.
//
//  * Recoverable failures (bad input, bad files, I/O, a peer that misbehaves) throw
//    updraft::Error with a message that names the thing at fault. They are caught at the
//    role boundary (CLI main, request handler, message handler), reported, and the role
//    goes on serving.
//  * Programmer errors (a violated precondition, an impossible state) are always-on checks:
//    UPD_CHECK(cond) << "context";  throws updraft::CheckFailure carrying file:line and the
//    failed condition. Tests can assert on it; roles log it and stop the operation.
//  * Every external library call (CUDA, cuBLAS, NCCL, ZeroMQ, RocksDB) is wrapped by a
//    checking macro that throws Error with the library's own message and file:line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace updraft {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class CheckFailure : public std::logic_error {
 public:
  explicit CheckFailure(const std::string& what) : std::logic_error(what) {}
};

namespace detail {

// Collects a message with operator<< and throws from its destructor. Used only by the
// macros below; the destructor is noexcept(false) on purpose.
class Thrower {
 public:
  Thrower(bool is_check, const char* file, int line, const char* cond) : is_check_(is_check) {
    os_ << file << ":" << line << ": ";
    if (cond != nullptr)
      os_ << "check failed: " << cond << " ";
  }
  Thrower(const Thrower&) = delete;
  Thrower& operator=(const Thrower&) = delete;
  ~Thrower() noexcept(false) {
    if (is_check_)
      throw CheckFailure(os_.str());
    throw Error(os_.str());
  }
  template <typename T>
  Thrower& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  bool is_check_;
  std::ostringstream os_;
};

// Turns `Voidify() & thrower << ...` into a void expression, so that the macros below are a
// single expression (safe inside an unbraced if/else).
struct Voidify {
  void operator&(const Thrower&) {}
};

}  // namespace detail
}  // namespace updraft

// UPD_CHECK(x > 0) << "x was " << x;   -> CheckFailure (programmer error)
#define UPD_CHECK(cond) \
  (cond) ? (void)0 : ::updraft::detail::Voidify() & ::updraft::detail::Thrower(true, __FILE__, __LINE__, #cond)

// UPD_REQUIRE(ok) << "bad header in " << path;  -> Error (recoverable, bad input)
#define UPD_REQUIRE(cond) \
  (cond) ? (void)0 : ::updraft::detail::Voidify() & ::updraft::detail::Thrower(false, __FILE__, __LINE__, nullptr)

// UPD_FAIL() << "message";  -> Error unconditionally
#define UPD_FAIL() ::updraft::detail::Thrower(false, __FILE__, __LINE__, nullptr)
