// Internal to the record codec (codec.cc, codec_checksum.cc): the checksum of a record as read
// off the wire, the same canonical payload record_checksum (codec.h) computes from RecordData.
#pragma once

#include <cstdint>

#include "updraft.capnp.h"

namespace updraft::messaging::detail {

uint32_t checksum_of(wire::Record::Reader r);

}  // namespace updraft::messaging::detail
