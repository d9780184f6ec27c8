// UPD_TEAM_FOR(team, i, n, body...): `for (int64_t i = 0; i < n; ++i) body` in an OpenMP team
// (static schedule) when `team` holds, else on the calling thread without entering the OpenMP
// runtime. `#pragma omp parallel for if (false)` still enters it: libgomp sets up and tears down a
// team of one around the loop, about 0.35 us a call on the 2-core Zen 4 host of session 42
// against 0.14 us for the 448-float add it wrapped, and a forward made dozens of such calls on
// rows too small to split (norms, residual adds, SiLU, RoPE, sampling's softmax, the bf16
// products' input rounding). Write it in the kernel itself, not in a helper function: in a
// target_clones kernel the team's body is then cloned with the kernel, as a `#pragma omp
// parallel` written there is, and an always_inline body function is compiled for each clone.
#pragma once

#include <cstdint>

#define UPD_TEAM_FOR(team, i, n, ...)                                                          \
  do {                                                                                         \
    const int64_t upd_team_n_ = (n);                                                           \
    if (team) {                                                                                \
      _Pragma("omp parallel for schedule(static)") for (int64_t i = 0; i < upd_team_n_; ++i) { \
        __VA_ARGS__;                                                                           \
      }                                                                                        \
    } else {                                                                                   \
      for (int64_t i = 0; i < upd_team_n_; ++i) {                                              \
        __VA_ARGS__;                                                                           \
      }                                                                                        \
    }                                                                                          \
  } while (0)
