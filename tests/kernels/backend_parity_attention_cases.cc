// Backend parity cases (backend_parity.h): attention over contiguous KV with causal, tree and
// TTT masks; paged attention over a shuffled block table (causal, tree and window modes, several
// head sizes); copy_rows in place.
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/kernels/backend_parity.h"

namespace updraft::parity {
namespace {

void attention_case(const Backend& b, const ops::AttentionMask& mask, int64_t T, int64_t S, int64_t NH, int64_t NKV,
                    int64_t HD) {
  auto qv = rand_vec(T * NH * HD, 20 + T, -2, 2), kv = rand_vec(S * NKV * HD, 21 + S, -2, 2),
       vv = rand_vec(S * NKV * HD, 22);
  Tensor q = make(qv, {T, NH, HD}, b, b.act), k = make(kv, {S, NKV, HD}, b, b.act),
         v = make(vv, {S, NKV, HD}, b, b.act);
  Tensor out = Tensor::empty({T, NH, HD}, b.act, b.device), lse = Tensor::empty({T, NH}, DType::F32, b.device);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  ops::attention(q, k, v, mask, scale, out, &lse);
  auto [want, want_lse] =
      ref::attention(rounded(qv, b.act), rounded(kv, b.act), rounded(vv, b.act), mask, T, NH, HD, S, NKV, scale);
  expect_close(fetch(out), want, atol(b), rtol(b), "attention out");
  expect_close(fetch(lse), want_lse, atol(b), rtol(b), "attention lse");
}

// An ancestor-closed random tree over T nodes (node 0 = root, parent(i) < i).
Tensor random_tree_mask(int64_t T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor m = Tensor::zeros({T, T}, DType::Bool);
  uint8_t* p = m.data<uint8_t>();
  for (int64_t i = 0; i < T; ++i) {
    if (i > 0) {
      const int64_t parent = static_cast<int64_t>(rng() % static_cast<uint64_t>(i));
      for (int64_t j = 0; j < T; ++j)
        p[i * T + j] = p[parent * T + j];
    }
    p[i * T + i] = 1;
  }
  return m;
}

// Three sequences in a cache whose blocks are shuffled; the reference gathers each sequence's
// keys in order and runs the plain attention reference with the matching mask. Modes: causal;
// tree (mask over the new tokens); window (mask over a window wider than the new tokens, as
// the draft tree's deeper levels use: the reference pads the queries up to the window with
// causal dummy rows and keeps the last n outputs).
enum class PagedMode { Causal, Tree, Window };

// HD 16 runs the generic CPU loop; 32, 56, 64, 80, 96 and 128 the unrolled ones, whose scores go
// 16 keys at a time (the long case has 37 keys: two full groups and a tail); 56 and 80 end each
// row in a half chunk of 8 floats. NH 6 puts three query heads on each kv head (the CPU kernel
// pairs a kv head's queries, and an odd last one with itself).
void paged_attention_case(const Backend& b, PagedMode mode, int64_t HD = 16, bool long_ctx = false, int64_t NH = 4) {
  const int64_t NKV = 2, BS = 4, NB = long_ctx ? 24 : 12, MAXB = long_ctx ? 10 : 5, W = 6;
  const std::vector<int32_t> kv_len = long_ctx ? std::vector<int32_t>{5, 37, 21} : std::vector<int32_t>{5, 17, 9};
  const std::vector<int32_t> n_new = {1, 4, 3};
  const std::vector<int32_t> win = mode == PagedMode::Window ? std::vector<int32_t>{2, 6, 5} : n_new;
  const int64_t B = 3;
  std::vector<int32_t> perm(NB);
  for (int64_t i = 0; i < NB; ++i)
    perm[i] = static_cast<int32_t>((i * 7 + 3) % NB);  // a permutation of the blocks
  std::vector<int32_t> table(B * MAXB, -1), q_start = {0};
  int64_t next = 0;
  for (int64_t s = 0; s < B; ++s) {
    for (int64_t j = 0; j < (kv_len[s] + BS - 1) / BS; ++j)
      table[s * MAXB + j] = perm[next++];
    q_start.push_back(q_start.back() + n_new[s]);
  }
  const int64_t T = q_start.back(), NSLOT = NB * BS;
  auto qv = rand_vec(T * NH * HD, 200, -2, 2), kv = rand_vec(NSLOT * NKV * HD, 201, -2, 2),
       vv = rand_vec(NSLOT * NKV * HD, 202);
  // Per sequence, a [w, w] mask whose last n rows are the new tokens' rows.
  std::vector<Tensor> subs;
  Tensor tm;
  if (mode != PagedMode::Causal) {
    tm = Tensor::zeros({T, W}, DType::Bool);
    for (int64_t s = 0; s < B; ++s) {
      const int64_t w = win[s], n = n_new[s];
      subs.push_back(random_tree_mask(w, 30 + s));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < w; ++j)
          tm.data<uint8_t>()[(q_start[s] + i) * W + j] = subs[s].data<uint8_t>()[(w - n + i) * w + j];
    }
  }
  ops::PagedKv cache{make(kv, {NSLOT, NKV, HD}, b, b.act), make(vv, {NSLOT, NKV, HD}, b, b.act), BS};
  Tensor out = Tensor::empty({T, NH, HD}, b.act, b.device);
  const float scale = 0.3f;
  ops::paged_attention(make(qv, {T, NH, HD}, b, b.act), cache, Tensor::from_i32(table, {B, MAXB}),
                       Tensor::from_i32(kv_len, {B}), Tensor::from_i32(q_start, {B + 1}), tm, scale, out,
                       mode == PagedMode::Window ? Tensor::from_i32(win, {B}) : Tensor());
  const Vec Q = rounded(qv, b.act), K = rounded(kv, b.act), V = rounded(vv, b.act);
  Vec want;
  for (int64_t s = 0; s < B; ++s) {
    const int64_t S = kv_len[s], n = n_new[s], w = win[s], row = NKV * HD;
    Vec ks, vs;
    for (int64_t j = 0; j < S; ++j) {
      const int64_t slot = table[s * MAXB + j / BS] * BS + j % BS;
      ks.insert(ks.end(), K.begin() + slot * row, K.begin() + (slot + 1) * row);
      vs.insert(vs.end(), V.begin() + slot * row, V.begin() + (slot + 1) * row);
    }
    Vec qs(static_cast<size_t>((w - n) * NH * HD), 0.0);  // dummy rows (window mode only)
    qs.insert(qs.end(), Q.begin() + q_start[s] * NH * HD, Q.begin() + q_start[s + 1] * NH * HD);
    const ops::AttentionMask mask =
        mode == PagedMode::Causal ? ops::AttentionMask::causal(S - n) : ops::AttentionMask::tree(S - w, subs[s]);
    auto got = ref::attention(qs, ks, vs, mask, w, NH, HD, S, NKV, scale).first;
    want.insert(want.end(), got.begin() + (w - n) * NH * HD, got.end());
  }
  const char* names[] = {"paged_attention causal", "paged_attention tree", "paged_attention window"};
  expect_close(fetch(out), want, atol(b), rtol(b),
               std::string(names[static_cast<int>(mode)]) + " HD " + std::to_string(HD) + " NH " + std::to_string(NH) +
                   (long_ctx ? " long" : ""));
}

void copy_rows_case(const Backend& b) {
  auto xv = rand_vec(10 * 6, 210);
  Tensor x = make(xv, {10, 2, 3}, b, b.act);
  // In place, as KV compaction does: rows 7 and 9 move to 3 and 5; row 1 onto itself.
  ops::copy_rows(x, Tensor::from_i32({7, 9, 1}, {3}), x, Tensor::from_i32({3, 5, 1}, {3}));
  Vec X = rounded(xv, b.act), want = X;
  for (auto [s, d] : {std::pair{7, 3}, std::pair{9, 5}})
    std::copy(X.begin() + s * 6, X.begin() + (s + 1) * 6, want.begin() + d * 6);
  expect_close(fetch(x), want, 0, 0, "copy_rows");
}

}  // namespace

void append_attention_cases(std::vector<OpCase>& c) {
  c.push_back({"attention_causal_prefill", false,
               [](const Backend& b) { attention_case(b, ops::AttentionMask::causal(0), 7, 7, 4, 2, 16); }});
  c.push_back({"attention_causal_decode", false,
               [](const Backend& b) { attention_case(b, ops::AttentionMask::causal(19), 1, 20, 4, 1, 32); }});
  c.push_back({"attention_causal_chunk", false,
               [](const Backend& b) { attention_case(b, ops::AttentionMask::causal(8), 4, 12, 6, 2, 8); }});
  c.push_back({"attention_tree", false, [](const Backend& b) {
                 attention_case(b, ops::AttentionMask::tree(5, random_tree_mask(6, 3)), 6, 11, 4, 2, 16);
               }});
  c.push_back({"attention_ttt", false,
               [](const Backend& b) { attention_case(b, ops::AttentionMask::ttt(3), 6, 24, 4, 2, 16); }});
  c.push_back({"attention_ttt_last_rows", false,
               [](const Backend& b) { attention_case(b, ops::AttentionMask::ttt(3, 2), 4, 24, 4, 2, 16); }});

  c.push_back({"paged_attention_causal", false, [](const Backend& b) { paged_attention_case(b, PagedMode::Causal); }});
  c.push_back({"paged_attention_tree", false, [](const Backend& b) { paged_attention_case(b, PagedMode::Tree); }});
  c.push_back({"paged_attention_window", false, [](const Backend& b) { paged_attention_case(b, PagedMode::Window); }});
  for (int64_t hd : {32, 56, 64, 80, 96, 128}) {
    const std::string h = "_hd" + std::to_string(hd);
    c.push_back({"paged_attention_causal" + h, false,
                 [=](const Backend& b) { paged_attention_case(b, PagedMode::Causal, hd, true); }});
    c.push_back({"paged_attention_tree" + h, false,
                 [=](const Backend& b) { paged_attention_case(b, PagedMode::Tree, hd, true); }});
    c.push_back({"paged_attention_window" + h, false,
                 [=](const Backend& b) { paged_attention_case(b, PagedMode::Window, hd, true); }});
  }
  for (int64_t hd : {56, 64}) {
    const std::string h = "_hd" + std::to_string(hd) + "_g3";
    c.push_back({"paged_attention_causal" + h, false,
                 [=](const Backend& b) { paged_attention_case(b, PagedMode::Causal, hd, true, 6); }});
    c.push_back({"paged_attention_tree" + h, false,
                 [=](const Backend& b) { paged_attention_case(b, PagedMode::Tree, hd, true, 6); }});
  }
  c.push_back({"copy_rows", false, copy_rows_case});
}

}  // namespace updraft::parity
