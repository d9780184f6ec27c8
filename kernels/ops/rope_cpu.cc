#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/ops/backend.h"
#include "kernels/ops/team_for.h"

namespace updraft::ops::cpu {
namespace {

// cos and sin of every row's angles (position x frequency), as rope computes them, for the
// positions and frequencies they were computed for. A forward rotates q and k of every layer at
// the same positions with the same frequencies: 2 x layers calls share one table, where each call
// computing its own took 8 us a layer at 9 rows of the built-in policy (a twentieth of the
// verification's forward). The key is the values themselves, so a table is reused only where it
// holds exactly what would be computed.
struct RopeTable {
  std::vector<int32_t> pos;
  std::vector<float> inv, cs, sn;  // cs, sn [T, half]
};

const RopeTable& rope_table(const int32_t* pos, int64_t T, const float* inv, int64_t half) {
  thread_local RopeTable t;
  const bool same = static_cast<int64_t>(t.pos.size()) == T && static_cast<int64_t>(t.inv.size()) == half &&
                    std::equal(pos, pos + T, t.pos.begin()) &&
                    std::memcmp(inv, t.inv.data(), sizeof(float) * static_cast<size_t>(half)) == 0;
  if (same)
    return t;
  t.pos.assign(pos, pos + T);
  t.inv.assign(inv, inv + half);
  t.cs.resize(static_cast<size_t>(T * half));
  t.sn.resize(static_cast<size_t>(T * half));
  float* cs = t.cs.data();
  float* sn = t.sn.data();
  const auto angles = [&](int64_t r) {
    for (int64_t i = 0; i < half; ++i) {
      const float a = static_cast<float>(pos[r]) * inv[i];
      cs[r * half + i] = std::cos(a);
      sn[r * half + i] = std::sin(a);
    }
  };
  UPD_TEAM_FOR(T * half > (1 << 12), r, T, angles(r));
  return t;
}

// One row's NH heads of HD rotated by the row's angles (cos cs, sin sn: HD / 2 each).
[[gnu::always_inline]] inline void rotate_row(float* x, int64_t NH, int64_t HD, const float* __restrict cs,
                                              const float* __restrict sn) {
  const int64_t half = HD / 2;
  for (int64_t h = 0; h < NH; ++h) {
    float* __restrict lo = x + h * HD;
    float* __restrict hi = lo + half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float a = lo[i], b = hi[i];
      lo[i] = a * cs[i] - b * sn[i];
      hi[i] = b * cs[i] + a * sn[i];
    }
  }
}

}  // namespace

// Built for AVX-512 and baseline x86-64, chosen at load time (as paged_attention): a row of
// heads rotates 16 pairs at a time.
__attribute__((target_clones("avx512f", "default"))) void rope(Tensor& x, const Tensor& positions,
                                                               const Tensor& inv_freq) {
  const int64_t T = x.size(0), NH = x.size(1), HD = x.size(2), half = HD / 2;
  const RopeTable& table = rope_table(positions.data<int32_t>(), T, inv_freq.data<float>(), half);
  const float* cs_all = table.cs.data();  // the calling thread's table, read by the whole team
  const float* sn_all = table.sn.data();
  float* xp = x.data<float>();
  UPD_TEAM_FOR(T * NH * HD > (1 << 15), t, T,
               rotate_row(xp + t * NH * HD, NH, HD, cs_all + t * half, sn_all + t * half));
}

}  // namespace updraft::ops::cpu
