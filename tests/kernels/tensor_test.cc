#include "kernels/core/tensor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <set>
#include <thread>
#include <vector>

namespace updraft {
namespace {

TEST(Tensor, ShapeViewsShareStorage) {
  Tensor t = Tensor::from_f32({0, 1, 2, 3, 4, 5}, {3, 2});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  Tensor r = t.rows(1, 3);
  EXPECT_EQ(r.shape(), (Shape{2, 2}));
  EXPECT_EQ(r.data<float>()[0], 2.f);
  r.data<float>()[0] = 42.f;
  EXPECT_EQ(t.data<float>()[2], 42.f);
  Tensor v = t.reshape({-1});
  EXPECT_EQ(v.shape(), (Shape{6}));
  EXPECT_EQ(t.reshape({2, -1}).shape(), (Shape{2, 3}));
  EXPECT_EQ(t.str(), "f32[3,2]@cpu");
}

TEST(Tensor, BadViewsAreCheckFailures) {
  Tensor t = Tensor::zeros({3, 2}, DType::F32);
  EXPECT_THROW(t.reshape({4, 2}), CheckFailure);
  EXPECT_THROW(t.reshape({-1, -1}), CheckFailure);
  EXPECT_THROW(t.rows(2, 4), CheckFailure);
  EXPECT_THROW(t.size(2), CheckFailure);
  Tensor undefined;
  EXPECT_THROW(undefined.raw(), CheckFailure);
}

TEST(Tensor, DtypeConversionRoundTrips) {
  Tensor t = Tensor::from_f32({1.0f, -2.5f, 0.1f, 65504.f}, {4});
  Tensor b = t.to_dtype(DType::BF16);
  EXPECT_EQ(b.dtype(), DType::BF16);
  EXPECT_EQ(b.nbytes(), 8u);
  auto back = b.to_f32_vector();
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_NEAR(back[2], 0.1f, 1e-3);
  auto h = t.to_dtype(DType::F16).to_f32_vector();
  EXPECT_EQ(h[3], 65504.f);
  Tensor i = Tensor::from_i32({1, -2, 3}, {3}).to_dtype(DType::I64);
  EXPECT_EQ(i.data<int64_t>()[1], -2);
  EXPECT_THROW(t.to_dtype(DType::I32), CheckFailure);
}

TEST(Tensor, FirstNonFiniteInEveryFloatFormat) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const DType dt : {DType::F32, DType::BF16, DType::F16}) {
    EXPECT_EQ(Tensor::from_f32({1.f, -3e38f * (dt == DType::F32), 0.f, 65504.f}, {4}).to_dtype(dt).first_non_finite(),
              -1)
        << dtype_name(dt) << ": the largest finite values are finite";
    EXPECT_EQ(Tensor::from_f32({1.f, 2.f, nan, inf}, {4}).to_dtype(dt).first_non_finite(), 2) << dtype_name(dt);
    EXPECT_EQ(Tensor::from_f32({0.f, -inf}, {2}).to_dtype(dt).first_non_finite(), 1) << dtype_name(dt);
  }
  EXPECT_EQ(Tensor::from_i32({-1, 0x7f800000}, {2}).first_non_finite(), -1) << "integers are always finite";
}

TEST(Tensor, CopyAndZero) {
  Tensor a = Tensor::from_f32({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::empty({4}, DType::F32);
  b.copy_from(a);
  EXPECT_EQ(b.to_f32_vector(), (std::vector<float>{1, 2, 3, 4}));
  b.zero_();
  EXPECT_EQ(b.to_f32_vector(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_THROW(b.copy_from(Tensor::zeros({3}, DType::F32)), CheckFailure);
}

TEST(Tensor, WrapKeepsOwnerAlive) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{7, 8});
  Tensor t = Tensor::wrap(owner->data(), {2}, DType::F32, Device::CPU, owner);
  std::weak_ptr<std::vector<float>> weak = owner;
  owner.reset();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(t.data<float>()[1], 8.f);
  t = Tensor();
  EXPECT_TRUE(weak.expired());
}

TEST(Device, CudaWithoutGpuIsAnError) {
  if (cuda_available())
    GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(Tensor::empty({4}, DType::F32, Device::CUDA), Error);
}

// Device blocks are recycled per thread (kernels/core/device.cc): a block one thread freed may
// still be read by work queued on that thread's stream, so another thread must not get it, while
// the thread itself gets it back. Host blocks go to any thread. The GPU case is skipped without one.
void expect_reuse(Device d, size_t bytes, bool across_threads) {
  void* a = device_alloc(d, bytes);
  device_free(d, a, bytes);
  void* other = nullptr;
  std::thread([&] { other = device_alloc(d, bytes); }).join();
  EXPECT_EQ(other == a, across_threads) << device_name(d);
  device_free(d, other, bytes);  // freed here, so this thread's now
  void* again = device_alloc(d, bytes);
  EXPECT_TRUE(again == a || again == other) << device_name(d) << ": this thread's idle block was not reused";
  device_free(d, again, bytes);
}

TEST(Device, HostBlocksAreReusedByAnyThread) {
  expect_reuse(Device::CPU, (size_t{5} << 20) + 7, true);  // a size class no other test here uses
}

// A request takes an idle block of a larger class, up to twice its own (a training step's
// buffers follow its token count): no fresh pages, so the freed block's bytes are still there.
TEST(Device, AHostRequestTakesAnIdleBlockUpToTwiceItsSize) {
  const size_t big = (size_t{60} << 20) + 11, small = (size_t{40} << 20) + 3;  // no other test here has blocks between
  auto* a = static_cast<unsigned char*>(device_alloc(Device::CPU, big));
  std::memset(a, 0x5a, big);
  device_free(Device::CPU, a, big);
  auto* b = static_cast<unsigned char*>(device_alloc(Device::CPU, small));
  EXPECT_EQ(b, a);
  EXPECT_EQ(b[small - 1], 0x5a) << "a fresh block, not the idle one";
  device_free(Device::CPU, b, small);
  void* c = device_alloc(Device::CPU, big);  // b went back to its own (the larger) class
  EXPECT_EQ(c, a);
  device_free(Device::CPU, c, big);
}

// A host free past the idle budget (1 GiB) lets the blocks idle the longest go, not itself: of
// three 384 MiB blocks freed in turn, the last two stay (each still holds what was written).
TEST(Device, AFullHostPoolLetsItsLongestIdleBlocksGo) {
  const size_t bytes = size_t{384} << 20;  // a size class of its own; two fill most of the budget
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) {
    auto* b = static_cast<unsigned char*>(device_alloc(Device::CPU, bytes));
    b[0] = static_cast<unsigned char>(1 + i);
    blocks.push_back(b);
  }
  for (void* b : blocks)
    device_free(Device::CPU, b, bytes);
  std::set<int> kept;
  std::vector<void*> again;
  for (int i = 0; i < 2; ++i) {
    auto* b = static_cast<unsigned char*>(device_alloc(Device::CPU, bytes));
    kept.insert(b[0]);
    again.push_back(b);
  }
  EXPECT_EQ(kept, (std::set<int>{2, 3}));
  for (void* b : again)
    device_free(Device::CPU, b, bytes);
}

// Small host blocks (small_host_blocks.h) come back to the thread that freed them, still holding
// what was written (the allocator's free would have written its list pointers over the start),
// and never to another thread; a block another thread frees is that thread's.
TEST(Device, ASmallHostBlockGoesBackToTheThreadThatFreedIt) {
  for (const size_t bytes : {size_t{40}, size_t{1000}, size_t{5000}, size_t{200} << 10}) {
    auto* a = static_cast<unsigned char*>(device_alloc(Device::CPU, bytes));
    std::memset(a, 0x3c, bytes);
    device_free(Device::CPU, a, bytes);
    void* other = nullptr;
    std::thread([&] {
      other = device_alloc(Device::CPU, bytes);
      std::memset(other, 0x7e, bytes);
      device_free(Device::CPU, other, bytes);
      void* mine = device_alloc(Device::CPU, bytes);
      EXPECT_EQ(mine, other) << bytes << " bytes: the other thread's freed block";
      device_free(Device::CPU, mine, bytes);
    }).join();
    EXPECT_NE(other, static_cast<void*>(a)) << bytes << " bytes: another thread got this thread's idle block";
    auto* again = static_cast<unsigned char*>(device_alloc(Device::CPU, bytes));
    EXPECT_EQ(again, a) << bytes << " bytes";
    for (size_t i = 0; i < std::min<size_t>(bytes, 64); ++i)
      ASSERT_EQ(again[i], 0x3c) << bytes << " bytes: byte " << i << " was overwritten: a fresh block";
    device_free(Device::CPU, again, bytes);
  }
}

TEST(Device, CudaBlocksAreReusedOnlyByTheThreadThatFreedThem) {
  if (!cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine";
  expect_reuse(Device::CUDA, 4096, false);
}

}  // namespace
}  // namespace updraft
