# updraft wire schemas (see docs/messaging.md for the framing, the checksum and the rules).
# Evolution rule: fields are only ever added (new ordinal at the end); none is removed,
# renumbered or retyped, so a reader of any version decodes a message of any other.
@0xf686377a2e34935f;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("updraft::wire");

# Element type of a tensor payload.
enum DType {
  bf16 @0;
  f16 @1;
  f32 @2;
}

# A dense row-major tensor carried as raw little-endian bytes.
struct Tensor {
  dtype @0 :DType;
  shape @1 :List(UInt32);
  data @2 :Data;
}

# Acceptance of one speculation round of the sequence.
struct RoundStats {
  drafted @0 :UInt32;
  accepted @1 :UInt32;
  # Of `accepted`, the drafts that model-free suffix sources proposed (rollout/spec/suffix_drafts.h):
  # from the request's sibling rollouts, and from recent completions. The rest were the drafter's.
  acceptedGroup @2 :UInt32;
  acceptedHistory @3 :UInt32;
}

# What the drafter learns from: one completed sequence of one worker.
struct Record {
  worker @0 :UInt32;
  seq @1 :UInt64;              # per worker, assigned by the sender, contiguous from 0
  incarnation @2 :UInt64;      # random per sender process; tells restarts apart
  policyVersion @3 :UInt64;
  drafterVersion @4 :UInt64;
  promptLength @5 :UInt32;     # tokens[0, promptLength) are the prompt
  tokens @6 :List(Int32);
  aux @7 :Tensor;              # policy aux hidden states, bf16 by default
  teacherK @8 :UInt32;         # top-k width; 0 when no teacher data
  teacherIds @9 :List(Int32);  # [responseLength, teacherK] row-major
  teacherLogprobs @10 :List(Float32);
  rounds @11 :List(RoundStats);
  checksum @12 :UInt32;        # CRC32C of the canonical payload (docs/messaging.md)
  # Response indices, ascending, where the serving speculation was rejected: the policy chose the
  # token there after turning down every draft offered (empty: not marked, or no speculation).
  rejected @13 :List(UInt32);
}

# Worker -> buffer, first message on a connection (and after a reconnect).
struct Hello {
  worker @0 :UInt32;
  incarnation @1 :UInt64;
  # The model the worker's records come from (0: not declared; its records get the contract's
  # checks only). Declared: the buffer refuses records inconsistent with it (docs/messaging.md).
  vocab @2 :UInt32;            # token and teacher ids lie in [0, vocab)
  auxWidth @3 :UInt32;         # aux is [tokens, auxWidth]
  teacherK @4 :UInt32;         # teacher rows are this wide (0: records carry no teacher data)
}

# Buffer -> worker, answer to Hello.
struct HelloReply {
  nextSeq @0 :UInt64;          # one past the highest seq the buffer holds for the worker
  bufferInstance @1 :UInt64;
}

# Buffer -> worker: seqs durably written (or already present), and seqs refused for good.
struct Ack {
  acked @0 :List(UInt64);
  rejected @1 :List(UInt64);
  rejectReason @2 :Text;
  bufferInstance @3 :UInt64;
}

enum WeightKind {
  policy @0;
  drafter @1;
}

struct Metric {
  name @0 :Text;
  value @1 :Float64;
}

# Trainer -> workers (PUB): a new weight version is available.
struct Announcement {
  version @0 :UInt64;
  kind @1 :WeightKind;
  path @2 :Text;
  sizeBytes @3 :UInt64;
  sha256 @4 :Data;             # 32 bytes
  metrics @5 :List(Metric);
  chunkCount @6 :UInt32;       # > 0 when the weights are also sent as WeightChunk messages
}

# Weights for workers without a shared filesystem; each chunk < 512 MiB. The chunks of a version
# are its files in manifest order (manifest.json last), each cut into pieces of the publisher's
# chunk size (an empty file is one empty chunk).
struct WeightChunk {
  version @0 :UInt64;
  kind @1 :WeightKind;
  index @2 :UInt32;
  count @3 :UInt32;
  offset @4 :UInt64;
  data @5 :Data;
  crc32c @6 :UInt32;           # of data
  file @7 :Text;               # the version directory's file this chunk belongs to; offset is within it
}

# Subscriber -> publisher (request/reply): chunk `index` of a version's transfer plan. The reply
# is a WeightChunk; one with count = 0 means the version is not (or no longer) served.
struct ChunkRequest {
  version @0 :UInt64;
  kind @1 :WeightKind;
  index @2 :UInt32;
}

# Late joiner -> trainer (REQ/REP): which version is current?
struct CurrentVersionRequest {
  kind @0 :WeightKind;
}
