#include "daemon/ops_client.h"

#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>

#include <array>
#include <asio.hpp>
#include <cctype>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace traind {
namespace {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// /metrics of a node is a few KiB; anything near this is not an ops server.
constexpr size_t kMaxReplyBytes = 1 << 20;

// A name's lookup, shared by the thread that does it and the caller, which
// may have given up on it.
struct Lookup {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  int error = 0;  // getaddrinfo's
  std::vector<tcp::endpoint> endpoints;
};

// The endpoints of `address` by `deadline`. An IP address is taken as it
// is; a name is looked up on a thread of its own, left behind when the
// system's resolver takes longer: asio's resolver is joined as it goes, so
// a DNS server that does not answer held a command 10 s and more a name,
// whatever its timeout. Throws OpsUnreachable.
std::vector<tcp::endpoint> resolveBy(const HostPort& address, Clock::time_point deadline,
                                     double timeout_seconds) {
  std::error_code not_numeric;
  const asio::ip::address ip = asio::ip::make_address(address.host, not_numeric);
  if (!not_numeric) return {tcp::endpoint(ip, address.port)};
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, host = address.host, port = std::to_string(address.port)] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int error = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
    std::vector<tcp::endpoint> endpoints;
    for (const addrinfo* a = error == 0 ? found : nullptr; a != nullptr; a = a->ai_next) {
      tcp::endpoint endpoint;
      if (a->ai_addrlen > endpoint.capacity()) continue;
      std::memcpy(endpoint.data(), a->ai_addr, a->ai_addrlen);
      endpoint.resize(a->ai_addrlen);
      endpoints.push_back(endpoint);
    }
    if (found) ::freeaddrinfo(found);
    std::lock_guard lock(lookup->mutex);
    lookup->done = true;
    lookup->error = error;
    lookup->endpoints = std::move(endpoints);
    lookup->done_cv.notify_all();
  }).detach();
  std::unique_lock lock(lookup->mutex);
  if (!lookup->done_cv.wait_until(lock, deadline, [&] { return lookup->done; }))
    throw OpsUnreachable(
        fmt::format("{}: no answer within {:g} s (from the resolver, looking up {})",
                    address.toString(), timeout_seconds, address.host));
  if (lookup->error != 0 || lookup->endpoints.empty())
    throw OpsUnreachable(
        fmt::format("{}: {}{}", address.toString(),
                    lookup->error != 0 ? ::gai_strerror(lookup->error) : "the name has no address",
                    missingZoneNote(address.toString())));
  return std::move(lookup->endpoints);
}

// Sends `request` and reads the answer until the server closes the
// connection or, when given, `whole` says the answer is complete (a server
// that keeps the connection open after its answer is still heard).
std::string exchange(const HostPort& address, std::string_view request, double timeout_seconds,
                     const std::function<bool(const std::string&)>& whole) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(int64_t(timeout_seconds * 1000));
  const std::vector<tcp::endpoint> endpoints = resolveBy(address, deadline, timeout_seconds);
  asio::io_context io;
  tcp::socket socket(io);
  std::string reply;
  std::error_code failure;
  bool sent = false;
  bool finished = false;
  std::array<char, 16 * 1024> piece;
  std::function<void()> readMore = [&] {
    socket.async_read_some(asio::buffer(piece), [&](std::error_code error, size_t n) {
      reply.append(piece.data(), n);
      if (error == asio::error::eof || (error == asio::error::connection_reset && !reply.empty()) ||
          (whole && whole(reply))) {
        finished = true;
        return;
      }
      if (error) {
        failure = error;
        return;
      }
      if (reply.size() > kMaxReplyBytes) {
        failure = make_error_code(asio::error::message_size);
        return;
      }
      readMore();
    });
  };
  asio::async_connect(socket, endpoints, [&](std::error_code error, const tcp::endpoint&) {
    if (error) {
      failure = error;
      return;
    }
    // Written and read at once: a server that answers before it has read
    // everything (a 400 for oversized headers) is heard either way; a
    // failed write shows in the read.
    asio::async_write(socket, asio::buffer(request.data(), request.size()),
                      [&](std::error_code error, size_t) { sent = !error; });
    readMore();
  });
  io.run_until(deadline);
  if (finished) return reply;
  if (failure)
    throw OpsUnreachable(
        address.toString() + ": " + failure.message() + missingZoneNote(address.toString()), sent);
  throw OpsUnreachable(fmt::format("{}: no {} within {:g} s", address.toString(),
                                   reply.empty() ? "answer" : "whole answer", timeout_seconds),
                       sent);
}

// An answer's head and body: where the head ends (after its blank line),
// and its Content-Length when it gives one.
struct AnswerHead {
  size_t end = std::string::npos;
  std::optional<size_t> content_length;
};
AnswerHead answerHead(const std::string& raw) {
  AnswerHead head;
  head.end = raw.find("\r\n\r\n");
  if (head.end == std::string::npos) return head;
  head.end += 4;
  const std::string_view lines(raw.data(), head.end);
  for (size_t at = lines.find("\r\n"); at != std::string_view::npos && at + 2 < lines.size();
       at = lines.find("\r\n", at + 2)) {
    const std::string_view line = lines.substr(at + 2, lines.find("\r\n", at + 2) - at - 2);
    constexpr std::string_view kName = "content-length:";
    if (line.size() <= kName.size()) continue;
    bool named = true;
    for (size_t i = 0; i < kName.size(); ++i)
      named = named && std::tolower(static_cast<unsigned char>(line[i])) == kName[i];
    if (!named) continue;
    std::string_view value = line.substr(kName.size());
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    // Digits alone, and no more than an answer may hold: else none.
    size_t length = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), length);
    if (error == std::errc() && end == value.data() + value.size() && length <= kMaxReplyBytes)
      head.content_length = length;
  }
  return head;
}

}  // namespace

std::string exchangeRaw(const HostPort& address, std::string_view request, double timeout_seconds) {
  return exchange(address, request, timeout_seconds, nullptr);
}

OpsReply requestOps(const HostPort& address, std::string_view method, std::string_view path,
                    double timeout_seconds) {
  const std::string request = fmt::format(
      "{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: trainctl\r\nContent-Length: 0\r\n"
      "Connection: close\r\n\r\n",
      method, path, address.toString());
  // Whole at its Content-Length, as a server may keep the connection open.
  const std::string raw = exchange(address, request, timeout_seconds, [](const std::string& r) {
    const AnswerHead head = answerHead(r);
    return head.end != std::string::npos && head.content_length &&
           r.size() >= head.end + *head.content_length;
  });
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody"
  const AnswerHead head = answerHead(raw);
  int status = 0;
  if (raw.rfind("HTTP/1.", 0) == 0 && raw.size() > 12 && raw[8] == ' ' &&
      head.end != std::string::npos) {
    const auto [end, error] = std::from_chars(raw.data() + 9, raw.data() + 12, status);
    if (error != std::errc() || end != raw.data() + 12) status = 0;
  }
  if (status < 100 || status > 599)
    throw OpsUnreachable(address.toString() + ": the answer is not HTTP");
  std::string body = raw.substr(head.end);
  if (head.content_length && body.size() < *head.content_length)
    throw OpsUnreachable(fmt::format("{}: the answer was cut short ({} of its {} bytes)",
                                     address.toString(), body.size(), *head.content_length));
  if (head.content_length) body.resize(*head.content_length);
  return {status, std::move(body)};
}

}  // namespace traind
