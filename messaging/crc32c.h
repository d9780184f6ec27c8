// CRC32C (Castagnoli), the record payload checksum.
//
// crc32c_extend(crc, data, n) continues a running checksum, so a payload made of several
// pieces is checksummed without concatenating them: crc32c(ab) == crc32c_extend(crc32c(a), b).
// Uses the SSE4.2 crc32 instruction when the CPU has it, a table otherwise; both give the
// same values (crc32c("123456789") == 0xE3069283). Thread-safe, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace updraft::messaging {

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

inline uint32_t crc32c(const void* data, size_t n) {
  return crc32c_extend(0, data, n);
}

// The portable table implementation, exposed so tests can compare it with the fast path.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);

}  // namespace updraft::messaging
