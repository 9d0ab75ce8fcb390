// SharedRegion: what a worker offers a ps on its host, and every reason a ps
// refuses an offer (falling back to TCP) instead of trusting it.
#include "rpc/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "test/traind_process.h"

namespace traind {
namespace {

// The reason attach() gives for `offer`, or "" when it maps it.
std::string refusal(const SharedRegion::Offer& offer, int64_t floats) {
  try {
    SharedRegion::attach(offer, floats);
    return "";
  } catch (const SharedRegionUnavailable& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("a ps maps the region a worker on its host offers, and both see each other's writes") {
  const SharedRegion worker = SharedRegion::create(1000);
  CHECK(worker.floats() == 1000);
  CHECK(worker.offer().bytes == SharedRegion::bytesFor(1000));
  CHECK(worker.offer().host == hostIdentity());
  const SharedRegion ps = SharedRegion::attach(worker.offer(), 1000);

  for (int i = 0; i < 1000; ++i) worker.gradients()[i] = float(i);
  CHECK(ps.gradients()[0] == 0.0f);
  CHECK(ps.gradients()[999] == 999.0f);
  ps.parameters()[0] = 0.5f;
  ps.parameters()[999] = -2.0f;
  CHECK(worker.parameters()[0] == 0.5f);
  CHECK(worker.parameters()[999] == -2.0f);
  // The buffers do not overlap, are aligned as FlatBuffer's, and the token
  // lies in the header page before them.
  CHECK(worker.parameters() >= worker.gradients() + 1000);
  CHECK(worker.gradients()[999] == 999.0f);
  CHECK(reinterpret_cast<uintptr_t>(worker.gradients()) % 64 == 0);
  CHECK(reinterpret_cast<uintptr_t>(worker.parameters()) % 64 == 0);
  CHECK(std::memcmp(reinterpret_cast<const char*>(worker.gradients()) - 4096,
                    worker.offer().token.data(), worker.offer().token.size()) == 0);
}

TEST_CASE("a ps refuses a region it cannot trust, saying why") {
  const SharedRegion worker = SharedRegion::create(256);
  SharedRegion::Offer offer = worker.offer();

  SECTION("another host") {
    offer.host = "another-boot-id pid:[1]";
    CHECK_THAT(refusal(offer, 256), Catch::Contains("another host"));
    offer.host = "";
    CHECK_THAT(refusal(offer, 256), Catch::Contains("another host"));
  }
  SECTION("a region of another model's size") {
    CHECK_THAT(refusal(offer, 100000), Catch::Contains("this model needs"));
  }
  SECTION("a wrong token") {
    offer.token[3] ^= 1;
    CHECK_THAT(refusal(offer, 256), Catch::Contains("does not hold the worker's token"));
  }
  SECTION("a descriptor that is not open") {
    offer.fd = 100000;
    CHECK_THAT(refusal(offer, 256), Catch::Contains("opening /proc/"));
  }
  SECTION("a file that is not a memfd") {
    const auto dir = testing::freshTempDir("shared_region");
    const std::string path = (dir / "region").string();
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, off_t(offer.bytes)) == 0);
    offer.fd = uint32_t(fd);
    CHECK_THAT(refusal(offer, 256), Catch::Contains("is not a memfd"));
    ::close(fd);
  }
  SECTION("a memfd its owner could still shrink") {
    // The seal is checked before the size: unsealed, a file of the right
    // size could be shrunk right after the size check.
    const int fd = ::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, off_t(offer.bytes) / 2) == 0);
    offer.fd = uint32_t(fd);
    CHECK_THAT(refusal(offer, 256), Catch::Contains("not sealed against shrinking"));
    ::close(fd);
  }
  SECTION("a sealed memfd whose pages are not allocated") {
    // Its pages would be allocated by the ps's first writes: charged to the
    // ps, or a SIGBUS when memory is short.
    const int fd = ::memfd_create("sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, off_t(offer.bytes)) == 0);
    REQUIRE(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    offer.fd = uint32_t(fd);
    CHECK_THAT(refusal(offer, 256), Catch::Contains("is not allocated in full"));
    ::close(fd);
  }
}

}  // namespace traind
