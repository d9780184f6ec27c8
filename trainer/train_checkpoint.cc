#include "trainer/train_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "kernels/io/atomic_file.h"
#include "kernels/io/safetensors.h"
#include "kernels/io/sha256.h"

namespace updraft::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kFormat = "updraft.train_checkpoint";
constexpr int64_t kVersion = 1;
constexpr size_t kMaxStateBytes = size_t{64} << 20;

std::string exp_avg_name(const std::string& param) {
  return "exp_avg." + param;
}
std::string exp_avg_sq_name(const std::string& param) {
  return "exp_avg_sq." + param;
}

fs::path clean_dir(const std::string& dir) {
  UPD_CHECK(!dir.empty()) << "checkpoint directory path is empty";
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename())  // "a/b/" -> "a/b"
    p = p.parent_path();
  return p;
}

fs::path with_suffix(const fs::path& dir, const char* suffix) {
  return fs::path(dir.string() + suffix);
}

fs::path parent_of(const fs::path& dir) {
  return dir.has_parent_path() ? dir.parent_path() : fs::path(".");
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  UPD_REQUIRE(::rename(from.c_str(), to.c_str()) == 0)
      << "cannot rename " << from.string() << " to " << to.string() << ": " << std::strerror(errno);
}

// A leftover is harmless (never read, discarded by the next save), so failing to remove it
// does not fail the save.
void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
}

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

void stage(const CheckpointSaveOptions& o, const char* name) {
  if (o.after_stage)
    o.after_stage(name);
}

json file_entry(const fs::path& path) {
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  UPD_REQUIRE(!ec) << path.string() << ": cannot stat the file just written: " << ec.message();
  return {{"bytes", static_cast<uint64_t>(bytes)}, {"sha256", sha256_file_hex(path.string())}};
}

std::string canonical_hash(json doc) {
  doc.erase("state_sha256");
  return sha256_hex(doc.dump());
}

// ---- reading trainer_state.json ---------------------------------------------------------------

const json& member(const json& j, const char* key, const std::string& where) {
  UPD_REQUIRE(j.is_object() && j.contains(key)) << where << ": missing \"" << key << "\"";
  return j[key];
}

int64_t get_int(const json& j, const char* key, const std::string& where) {
  const json& v = member(j, key, where);
  UPD_REQUIRE(v.is_number_integer()) << where << ": \"" << key << "\" is not an integer";
  return v.get<int64_t>();
}

double get_double(const json& j, const char* key, const std::string& where) {
  const json& v = member(j, key, where);
  UPD_REQUIRE(v.is_number()) << where << ": \"" << key << "\" is not a number";
  return v.get<double>();
}

std::string get_string(const json& j, const char* key, const std::string& where) {
  const json& v = member(j, key, where);
  UPD_REQUIRE(v.is_string()) << where << ": \"" << key << "\" is not a string";
  return v.get<std::string>();
}

std::string read_state_file(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  UPD_REQUIRE(!ec) << path.string() << ": missing or unreadable: " << ec.message();
  UPD_REQUIRE(size <= kMaxStateBytes) << path.string() << ": " << size << " bytes, over the " << (kMaxStateBytes >> 20)
                                      << " MiB limit";
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  UPD_REQUIRE(in.good() || in.eof()) << path.string() << ": read failed";
  return s.str();
}

// Everything in trainer_state.json, checked.
struct StateDoc {
  TrainState state;
  int64_t opt_steps = 0;
  AdamWOptions opt_options;
  std::map<std::string, std::pair<uint64_t, std::string>> files;  // name -> (bytes, sha256)
};

StateDoc parse_state(const fs::path& path) {
  const std::string where = path.string();
  const std::string text = read_state_file(path);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    UPD_FAIL() << where << ": not valid JSON (truncated or damaged?): " << e.what();
  }
  UPD_REQUIRE(doc.is_object()) << where << ": not a JSON object";
  const std::string recorded = get_string(doc, "state_sha256", where);
  UPD_REQUIRE(recorded == canonical_hash(doc)) << where << ": state_sha256 does not match the contents (damaged)";
  UPD_REQUIRE(get_string(doc, "format", where) == kFormat) << where << ": format is not \"" << kFormat << "\"";
  const int64_t version = get_int(doc, "version", where);
  UPD_REQUIRE(version == kVersion) << where << ": version " << version << " (this build reads " << kVersion << ")";

  StateDoc out;
  out.state.step = get_int(doc, "step", where);
  UPD_REQUIRE(out.state.step >= 0) << where << ": step " << out.state.step << " is negative";

  const std::string opt_where = where + ": optimizer";
  const json& opt = member(doc, "optimizer", where);
  UPD_REQUIRE(get_string(opt, "type", opt_where) == "adamw") << opt_where << ": type is not \"adamw\"";
  out.opt_steps = get_int(opt, "steps", opt_where);
  UPD_REQUIRE(out.opt_steps >= 0) << opt_where << ": steps " << out.opt_steps << " is negative";
  out.opt_options.beta1 = get_double(opt, "beta1", opt_where);
  out.opt_options.beta2 = get_double(opt, "beta2", opt_where);
  out.opt_options.eps = get_double(opt, "eps", opt_where);
  out.opt_options.weight_decay = get_double(opt, "weight_decay", opt_where);

  const std::string sched_where = where + ": schedule";
  const json& sched = member(doc, "schedule", where);
  LrScheduleOptions& s = out.state.schedule;
  s.peak_lr = get_double(sched, "peak_lr", sched_where);
  s.total_steps = get_int(sched, "total_steps", sched_where);
  s.warmup_steps = get_int(sched, "warmup_steps", sched_where);
  s.warmup_ratio = get_double(sched, "warmup_ratio", sched_where);
  s.min_lr_ratio = get_double(sched, "min_lr_ratio", sched_where);
  try {
    s.decay = lr_decay_from_name(get_string(sched, "decay", sched_where));
    out.opt_options.validate();
    LrSchedule check(s);
  } catch (const Error& e) {
    UPD_FAIL() << where << ": " << e.what();
  }

  out.state.user = member(doc, "user", where);

  const json& files = member(doc, "files", where);
  UPD_REQUIRE(files.is_object() && files.size() == 2 && files.contains(kModelFile) && files.contains(kOptimizerFile))
      << where << ": \"files\" must list exactly " << kModelFile << " and " << kOptimizerFile;
  for (const char* name : {kModelFile, kOptimizerFile}) {
    const std::string file_where = where + ": files." + name;
    const json& f = files[name];
    const int64_t bytes = get_int(f, "bytes", file_where);
    UPD_REQUIRE(bytes >= 0) << file_where << ": negative size";
    out.files[name] = {static_cast<uint64_t>(bytes), get_string(f, "sha256", file_where)};
  }
  return out;
}

// ---- checking the tensor files ------------------------------------------------------------------

void check_file_integrity(const fs::path& path, uint64_t bytes, const std::string& sha) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  UPD_REQUIRE(!ec) << path.string() << ": missing or unreadable: " << ec.message();
  UPD_REQUIRE(size == bytes) << path.string() << ": " << size << " bytes, the checkpoint recorded " << bytes
                             << " (truncated or replaced)";
  const std::string got = sha256_file_hex(path.string());
  UPD_REQUIRE(got == sha) << path.string() << ": sha256 " << got << " does not match the recorded " << sha
                          << " (damaged, or from another checkpoint)";
}

void check_tensor(const SafetensorsFile& f, const std::string& name, const Param& p) {
  UPD_REQUIRE(f.has(name)) << f.path() << ": tensor '" << name << "' is missing";
  const TensorInfo& info = f.info(name);
  UPD_REQUIRE(info.dtype == DType::F32) << f.path() << ": tensor '" << name << "' is " << dtype_name(info.dtype)
                                        << ", expected f32";
  UPD_REQUIRE(info.shape == p.value.shape())
      << f.path() << ": tensor '" << name << "' has shape " << shape_str(info.shape) << ", the parameter '" << p.name
      << "' has " << shape_str(p.value.shape());
}

void check_no_extras(const SafetensorsFile& f, const std::set<std::string>& expected) {
  std::vector<std::string> extra;
  for (const std::string& n : f.names())
    if (expected.count(n) == 0)
      extra.push_back(n);
  if (extra.empty())
    return;
  std::ostringstream list;
  for (size_t i = 0; i < extra.size() && i < 5; ++i)
    list << (i ? ", '" : "'") << extra[i] << "'";
  if (extra.size() > 5)
    list << " and " << extra.size() - 5 << " more";
  UPD_FAIL() << f.path() << ": " << extra.size() << " tensor(s) the model does not have: " << list.str();
}

}  // namespace

void save_train_checkpoint(const std::string& dir_arg, const ParamSet& params, const AdamW& opt,
                           const TrainState& state, const CheckpointSaveOptions& options) {
  UPD_CHECK(&opt.params() == &params) << "save_train_checkpoint: the optimiser was built on another parameter set";
  UPD_CHECK(state.step >= 0) << "save_train_checkpoint: step " << state.step;
  LrSchedule validated(state.schedule);  // never write a checkpoint that cannot be loaded
  const fs::path dir = clean_dir(dir_arg), tmp = with_suffix(dir, ".tmp"), prev = with_suffix(dir, ".prev");
  const fs::path parent = parent_of(dir);
  std::error_code ec;
  UPD_REQUIRE(fs::is_directory(parent, ec))
      << parent.string() << ": the parent of checkpoint " << dir.string() << " is not a directory";
  // Finish what an interrupted save left (see the header): "<dir>.prev" is the old checkpoint
  // when <dir> is absent, a leftover otherwise; "<dir>.tmp" is never a live checkpoint.
  if (path_exists(prev)) {
    if (path_exists(dir)) {
      remove_quietly(prev);
    } else {
      rename_or_fail(prev, dir);
      fsync_dir(parent.string());
    }
  }
  if (path_exists(dir)) {
    const bool empty = fs::is_directory(dir, ec) && fs::is_empty(dir, ec) && !ec;
    UPD_REQUIRE(fs::is_directory(dir, ec) && (empty || path_exists(dir / kStateFile)))
        << dir.string() << ": exists and is not a training checkpoint; refusing to replace it";
  }
  fs::remove_all(tmp, ec);
  UPD_REQUIRE(!ec) << tmp.string() << ": cannot remove the leftover of an interrupted save: " << ec.message();
  fs::create_directory(tmp, ec);
  UPD_REQUIRE(!ec) << tmp.string() << ": cannot create: " << ec.message();
  stage(options, "tmp_created");

  save_safetensors((tmp / kModelFile).string(), params.values(), {{"format", "pt"}});
  stage(options, "model_written");
  std::vector<std::pair<std::string, Tensor>> moments;
  for (size_t i = 0; i < params.size(); ++i) {
    moments.emplace_back(exp_avg_name(params[i].name), opt.exp_avg(i));
    moments.emplace_back(exp_avg_sq_name(params[i].name), opt.exp_avg_sq(i));
  }
  save_safetensors((tmp / kOptimizerFile).string(), moments);
  stage(options, "optimizer_written");

  const AdamWOptions& o = opt.options();
  const LrScheduleOptions& s = state.schedule;
  json doc = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", state.step},
      {"optimizer",
       {{"type", "adamw"},
        {"steps", opt.steps()},
        {"beta1", o.beta1},
        {"beta2", o.beta2},
        {"eps", o.eps},
        {"weight_decay", o.weight_decay}}},
      {"schedule",
       {{"decay", lr_decay_name(s.decay)},
        {"peak_lr", s.peak_lr},
        {"total_steps", s.total_steps},
        {"warmup_steps", s.warmup_steps},
        {"warmup_ratio", s.warmup_ratio},
        {"min_lr_ratio", s.min_lr_ratio}}},
      {"params", {{"count", params.size()}, {"numel", params.numel()}}},
      {"user", state.user},
      {"files", {{kModelFile, file_entry(tmp / kModelFile)}, {kOptimizerFile, file_entry(tmp / kOptimizerFile)}}},
  };
  std::string text;
  try {
    doc["state_sha256"] = canonical_hash(doc);
    text = doc.dump(2) + "\n";
  } catch (const json::exception& e) {
    UPD_FAIL() << dir.string() << ": the trainer state cannot be written as JSON: " << e.what();
  }
  write_file_atomic((tmp / kStateFile).string(), text);
  stage(options, "state_written");

  if (!path_exists(dir)) {
    rename_or_fail(tmp, dir);
    fsync_dir(parent.string());
    stage(options, "swapped");
    stage(options, "done");
    return;
  }
  if (options.use_rename_exchange) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      fsync_dir(parent.string());
      stage(options, "swapped");
      remove_quietly(tmp);  // the old checkpoint
      stage(options, "done");
      return;
    }
    const int e = errno;
    UPD_REQUIRE(e == EINVAL || e == ENOSYS || e == EOPNOTSUPP)
        << "cannot exchange " << tmp.string() << " and " << dir.string() << ": " << std::strerror(e);
  }
  rename_or_fail(dir, prev);
  fsync_dir(parent.string());
  stage(options, "old_moved");
  rename_or_fail(tmp, dir);
  fsync_dir(parent.string());
  stage(options, "swapped");
  remove_quietly(prev);
  stage(options, "done");
}

TrainState load_train_checkpoint(const std::string& dir_arg, ParamSet& params, AdamW& opt) {
  UPD_CHECK(&opt.params() == &params) << "load_train_checkpoint: the optimiser was built on another parameter set";
  fs::path dir = clean_dir(dir_arg);
  if (!path_exists(dir) && path_exists(with_suffix(dir, ".prev")))
    dir = with_suffix(dir, ".prev");  // a save was interrupted between its two renames
  std::error_code ec;
  UPD_REQUIRE(fs::is_directory(dir, ec)) << dir.string() << ": no checkpoint directory";

  const StateDoc doc = parse_state(dir / kStateFile);
  for (const auto& [name, entry] : doc.files)
    check_file_integrity(dir / name, entry.first, entry.second);

  const SafetensorsFile model = SafetensorsFile::open((dir / kModelFile).string());
  const SafetensorsFile moments = SafetensorsFile::open((dir / kOptimizerFile).string());
  std::set<std::string> model_names, moment_names;
  for (const Param* p : params) {
    check_tensor(model, p->name, *p);
    check_tensor(moments, exp_avg_name(p->name), *p);
    check_tensor(moments, exp_avg_sq_name(p->name), *p);
    model_names.insert(p->name);
    moment_names.insert(exp_avg_name(p->name));
    moment_names.insert(exp_avg_sq_name(p->name));
  }
  check_no_extras(model, model_names);
  check_no_extras(moments, moment_names);

  // Everything is known good: replace the state (restore checks before it changes anything).
  std::vector<Tensor> m, v;
  for (const Param* p : params) {
    m.push_back(moments.get(exp_avg_name(p->name)));
    v.push_back(moments.get(exp_avg_sq_name(p->name)));
  }
  opt.restore(doc.opt_steps, doc.opt_options, m, v);
  for (Param* p : params)
    p->value.copy_from(model.get(p->name));
  return doc.state;
}

}  // namespace updraft::train
