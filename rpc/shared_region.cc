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

// Maps `bytes` of `fd` for reading and writing.
void* mapShared(int fd, uint64_t bytes) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) throw SharedRegionUnavailable(errnoText("mmap", errno));
  return base;
}

}  // namespace

uint64_t SharedRegion::bytesFor(int64_t floats) {
  return kPage + 2 * pagesFor(uint64_t(floats) * sizeof(float));
}

void SharedRegion::Unmap::operator()(void* base) const { ::munmap(base, bytes); }

SharedRegion::SharedRegion(Mapping mapping, int64_t floats, kj::AutoCloseFd fd, Offer offer)
    : mapping_(std::move(mapping)), floats_(floats), fd_(kj::mv(fd)), offer_(std::move(offer)) {}

float* SharedRegion::gradients() const {
  return reinterpret_cast<float*>(static_cast<char*>(mapping_.get()) + kPage);
}

float* SharedRegion::parameters() const {
  return gradients() + pagesFor(uint64_t(floats_) * sizeof(float)) / sizeof(float);
}

SharedRegion SharedRegion::create(int64_t floats) {
  if (hostIdentity().empty())
    throw SharedRegionUnavailable("cannot read this host's boot id and pid namespace in /proc");
  const uint64_t bytes = bytesFor(floats);
  const int created = ::memfd_create("traind-tensors", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (created < 0) throw SharedRegionUnavailable(errnoText("memfd_create", errno));
  kj::AutoCloseFd fd(created);
  if (::ftruncate(fd.get(), off_t(bytes)) != 0)
    throw SharedRegionUnavailable(errnoText("ftruncate", errno));
  // Allocated now, by the worker: its pages are charged to the worker (not
  // to the ps that would otherwise touch them first), and a shortage of
  // memory is this error instead of a SIGBUS in either process later.
  if (::fallocate(fd.get(), 0, 0, off_t(bytes)) != 0)
    throw SharedRegionUnavailable(errnoText("allocating the region", errno));
  // Sealed before anyone else sees it: its size is fixed for good.
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    throw SharedRegionUnavailable(errnoText("sealing the memfd", errno));
  Mapping mapping(mapShared(fd.get(), bytes), Unmap{bytes});

  Offer offer;
  offer.host = hostIdentity();
  offer.pid = uint32_t(::getpid());
  offer.fd = uint32_t(fd.get());
  offer.bytes = bytes;
  if (::getrandom(offer.token.data(), offer.token.size(), 0) != ssize_t(offer.token.size()))
    throw SharedRegionUnavailable(errnoText("getrandom", errno));
  std::memcpy(mapping.get(), offer.token.data(), offer.token.size());
  return SharedRegion(std::move(mapping), floats, kj::mv(fd), std::move(offer));
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
  const int pinned_fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (pinned_fd < 0) {
    const int error = errno;
    std::string why = errnoText("opening " + path, error);
    if (error == EACCES || error == EPERM) why += " (does the ps run as another user?)";
    throw SharedRegionUnavailable(why);
  }
  const kj::AutoCloseFd pinned(pinned_fd);
  const std::string own = fmt::format("/proc/self/fd/{}", pinned.get());
  char target[256] = {};
  if (::readlink(own.c_str(), target, sizeof target - 1) < 0) {
    const int error = errno;
    throw SharedRegionUnavailable(errnoText("reading " + own, error));
  }
  if (std::strncmp(target, "/memfd:", 7) != 0)
    throw SharedRegionUnavailable(path + " is not a memfd");
  struct statfs filesystem {};
  if (::fstatfs(pinned.get(), &filesystem) != 0 || filesystem.f_type != TMPFS_MAGIC)
    throw SharedRegionUnavailable(path + " is not a memfd on tmpfs");
  const int opened = ::open(own.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (opened < 0) {
    const int error = errno;
    throw SharedRegionUnavailable(errnoText("opening " + path, error));
  }
  const kj::AutoCloseFd fd(opened);
  // Sealed against shrinking before its size is looked at: unsealed, the
  // worker could shrink the file under this mapping (after the size check,
  // even), and every later access past its end would kill this process.
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    throw SharedRegionUnavailable(path + " is not sealed against shrinking");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) != bytes)
    throw SharedRegionUnavailable(path + " is not a region of " + std::to_string(bytes) + " bytes");
  // Allocated by the worker (create() does): its pages are the worker's
  // memory, and no write of the ps's can fail for want of one.
  if (uint64_t(st.st_blocks) * 512 < bytes)
    throw SharedRegionUnavailable(path + " is not allocated in full");
  Mapping mapping(mapShared(fd.get(), bytes), Unmap{bytes});
  if (std::memcmp(mapping.get(), offer.token.data(), offer.token.size()) != 0)
    throw SharedRegionUnavailable(path + " does not hold the worker's token");
  // The mapping holds the file; the descriptor closes here.
  return SharedRegion(std::move(mapping), floats, kj::AutoCloseFd(), Offer{});
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
