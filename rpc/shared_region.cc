#include "rpc/shared_region.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>
#include <utility>

namespace traind {
namespace {

constexpr uint64_t kPage = 4096;

uint64_t pagesFor(uint64_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// "what: the error" of `error` (errno, read before anything that may change it).
std::string errnoText(std::string_view what, int error) {
  return fmt::format("{}: {}", what, std::strerror(error));
}

// Closes a descriptor on every path out of a function.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

uint64_t SharedRegion::bytesFor(int64_t floats) {
  return kPage + 2 * pagesFor(uint64_t(floats) * sizeof(float));
}

SharedRegion::SharedRegion(void* base, uint64_t bytes, int64_t floats, int fd, Offer offer)
    : base_(base),
      bytes_(bytes),
      floats_(floats),
      gradients_(reinterpret_cast<float*>(static_cast<char*>(base) + kPage)),
      parameters_(reinterpret_cast<float*>(static_cast<char*>(base) + kPage +
                                           pagesFor(uint64_t(floats) * sizeof(float)))),
      fd_(fd),
      offer_(std::move(offer)) {}

SharedRegion::SharedRegion(SharedRegion&& other) noexcept { *this = std::move(other); }

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    release();
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    floats_ = std::exchange(other.floats_, 0);
    gradients_ = std::exchange(other.gradients_, nullptr);
    parameters_ = std::exchange(other.parameters_, nullptr);
    fd_ = std::exchange(other.fd_, -1);
    offer_ = std::move(other.offer_);
  }
  return *this;
}

SharedRegion::~SharedRegion() { release(); }

void SharedRegion::release() noexcept {
  if (base_) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

SharedRegion SharedRegion::create(int64_t floats) {
  if (hostIdentity().empty())
    throw SharedRegionUnavailable("cannot read this host's boot id and pid namespace in /proc");
  const uint64_t bytes = bytesFor(floats);
  const int fd = ::memfd_create("traind-tensors", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw SharedRegionUnavailable(errnoText("memfd_create", errno));
  FdCloser closer{fd};
  if (::ftruncate(fd, off_t(bytes)) != 0)
    throw SharedRegionUnavailable(errnoText("ftruncate", errno));
  // Allocated now, by the worker: its pages are charged to the worker (not
  // to the ps that would otherwise touch them first), and a shortage of
  // memory is this error instead of a SIGBUS in either process later.
  if (::fallocate(fd, 0, 0, off_t(bytes)) != 0)
    throw SharedRegionUnavailable(errnoText("allocating the region", errno));
  // Sealed before anyone else sees it: its size is fixed for good.
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    throw SharedRegionUnavailable(errnoText("sealing the memfd", errno));
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) throw SharedRegionUnavailable(errnoText("mmap", errno));

  Offer offer;
  offer.host = hostIdentity();
  offer.pid = uint32_t(::getpid());
  offer.fd = uint32_t(fd);
  offer.bytes = bytes;
  if (::getrandom(offer.token.data(), offer.token.size(), 0) != ssize_t(offer.token.size())) {
    const int error = errno;
    ::munmap(base, bytes);
    throw SharedRegionUnavailable(errnoText("getrandom", error));
  }
  std::memcpy(base, offer.token.data(), offer.token.size());
  closer.fd = -1;
  return SharedRegion(base, bytes, floats, fd, std::move(offer));
}

SharedRegion SharedRegion::attach(const Offer& offer, int64_t floats) {
  if (offer.host.empty() || offer.host != hostIdentity())
    throw SharedRegionUnavailable("the worker runs on another host (or in another pid namespace)");
  const uint64_t bytes = bytesFor(floats);
  if (offer.bytes != bytes)
    throw SharedRegionUnavailable(
        fmt::format("the worker's region has {} bytes, this model needs {}", offer.bytes, bytes));

  // The peer's descriptor is pinned with O_PATH, which opens nothing (no
  // device driver's open runs, no FUSE server is asked), and everything is
  // checked on this process's own descriptor, which the peer cannot swap
  // for another file as it could its own between two looks at it. Only
  // then is the file opened for reading and writing: a memfd on tmpfs.
  const std::string path = fmt::format("/proc/{}/fd/{}", offer.pid, offer.fd);
  const int pinned = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (pinned < 0) {
    const int error = errno;
    std::string why = errnoText("opening " + path, error);
    if (error == EACCES || error == EPERM) why += " (does the ps run as another user?)";
    throw SharedRegionUnavailable(why);
  }
  FdCloser pinned_closer{pinned};
  const std::string own = fmt::format("/proc/self/fd/{}", pinned);
  char target[256] = {};
  if (::readlink(own.c_str(), target, sizeof target - 1) < 0) {
    const int error = errno;
    throw SharedRegionUnavailable(errnoText("reading " + own, error));
  }
  if (std::strncmp(target, "/memfd:", 7) != 0)
    throw SharedRegionUnavailable(path + " is not a memfd");
  struct statfs filesystem {};
  if (::fstatfs(pinned, &filesystem) != 0 || filesystem.f_type != TMPFS_MAGIC)
    throw SharedRegionUnavailable(path + " is not a memfd on tmpfs");
  const int fd = ::open(own.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    throw SharedRegionUnavailable(errnoText("opening " + path, error));
  }
  FdCloser closer{fd};
  // Sealed against shrinking before its size is looked at: unsealed, the
  // worker could shrink the file under this mapping (after the size check,
  // even), and every later access past its end would kill this process.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    throw SharedRegionUnavailable(path + " is not sealed against shrinking");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) != bytes)
    throw SharedRegionUnavailable(path + " is not a region of " + std::to_string(bytes) + " bytes");
  // Allocated by the worker (create() does): its pages are the worker's
  // memory, and no write of the ps's can fail for want of one.
  if (uint64_t(st.st_blocks) * 512 < bytes)
    throw SharedRegionUnavailable(path + " is not allocated in full");
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) throw SharedRegionUnavailable(errnoText("mmap", errno));
  if (std::memcmp(base, offer.token.data(), offer.token.size()) != 0) {
    ::munmap(base, bytes);
    throw SharedRegionUnavailable(path + " does not hold the worker's token");
  }
  return SharedRegion(base, bytes, floats, -1, Offer{});
}

void writeOffer(const SharedRegion::Offer& offer, wire::SharedRegionOffer::Builder out) {
  out.setHost(offer.host);
  out.setPid(offer.pid);
  out.setFd(offer.fd);
  out.setBytes(offer.bytes);
  out.setToken(capnp::Data::Reader(offer.token.data(), offer.token.size()));
}

SharedRegion::Offer readOffer(wire::SharedRegionOffer::Reader in) {
  SharedRegion::Offer offer;
  offer.host = in.getHost();
  offer.pid = in.getPid();
  offer.fd = in.getFd();
  offer.bytes = in.getBytes();
  const capnp::Data::Reader token = in.getToken();
  if (token.size() != offer.token.size())
    throw SharedRegionUnavailable(fmt::format("a token of {} bytes", token.size()));
  std::memcpy(offer.token.data(), token.begin(), token.size());
  return offer;
}

std::string hostIdentity() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  char ns[64] = {};
  if (::readlink("/proc/self/ns/pid", ns, sizeof ns - 1) < 0) return {};
  if (boot_id.empty()) return {};
  return boot_id + " " + ns;
}

}  // namespace traind
