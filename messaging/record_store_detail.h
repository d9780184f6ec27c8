// Internal to the record store's .cc files (record_store.cc, record_store_read.cc); include it
// from nowhere else. Not part of the public API (see record_store.h).
//
// UPD_ROCKS_CHECK(expr): evaluates expr (a rocksdb::Status) once; when it is not ok, throws
// updraft::Error with RocksDB's message and the expression's text, followed by whatever the
// caller streams after the macro (e.g. UPD_ROCKS_CHECK(db->Write(...)) << path).
#pragma once

#include <rocksdb/status.h>

#include "kernels/core/error.h"

// Checks a rocksdb::Status; on failure throws updraft::Error with RocksDB's message.
#define UPD_ROCKS_CHECK(expr)                            \
  for (::rocksdb::Status upd_s_ = (expr); !upd_s_.ok();) \
  UPD_FAIL() << "RocksDB: " << upd_s_.ToString() << " in " #expr ": "
