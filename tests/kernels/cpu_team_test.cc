// release_cpu_team (kernels/core/cpu_team.h): a thread's OpenMP helpers end when it releases
// them, and only that thread's.
#include "kernels/core/cpu_team.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <thread>

#include "tests/cpu_team_util.h"

namespace updraft {
namespace {

using cpu_team_util::own_threads;

// A parallel region of two threads on the calling thread; how many ran it.
int two_thread_region() {
  std::atomic<int> ran{0};
#pragma omp parallel num_threads(2)
  ran += 1;
  return ran.load();
}

TEST(CpuTeam, ReleaseEndsTheCallingThreadsHelpersOnly) {
  release_cpu_team();  // whatever an earlier region of this thread left
  const int base = own_threads();
  ASSERT_GT(base, 0);
  ASSERT_EQ(two_thread_region(), 2);
  EXPECT_EQ(own_threads(), base + 1) << "the region's helper stays for the next region";
  std::thread other([&] {
    ASSERT_EQ(two_thread_region(), 2);
    EXPECT_EQ(own_threads(), base + 3);  // this thread and its helper beside ours
    release_cpu_team();
    EXPECT_EQ(own_threads(), base + 2) << "its helper ends; ours stays";
  });
  other.join();
  EXPECT_EQ(own_threads(), base + 1);
  release_cpu_team();
  EXPECT_EQ(own_threads(), base);
  release_cpu_team();  // nothing held: nothing to do
  EXPECT_EQ(own_threads(), base);
  ASSERT_EQ(two_thread_region(), 2);  // a fresh team after a release
  EXPECT_EQ(own_threads(), base + 1);
}

TEST(CpuTeam, InsideARegionReleaseLeavesTheTeamAlone) {
  release_cpu_team();
  const int base = own_threads();
  std::atomic<int> ran{0};
#pragma omp parallel num_threads(2)
  {
    release_cpu_team();  // the team is in use: nothing happens, nothing fails
    ran += 1;
  }
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(own_threads(), base + 1);
  release_cpu_team();
  EXPECT_EQ(own_threads(), base);
}

}  // namespace
}  // namespace updraft
