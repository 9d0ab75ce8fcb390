#include "daemon/ops_client.h"

#include <fmt/format.h>

#include <asio.hpp>
#include <charconv>
#include <chrono>

namespace traind {
namespace {

using asio::ip::tcp;

// /metrics of a node is a few KiB; anything near this is not an ops server.
constexpr size_t kMaxReplyBytes = 1 << 20;

}  // namespace

std::string exchangeRaw(const HostPort& address, std::string_view request, double timeout_seconds) {
  asio::io_context io;
  tcp::resolver resolver(io);
  tcp::socket socket(io);
  std::string reply;
  std::error_code failure;
  bool sent = false;
  bool finished = false;
  resolver.async_resolve(
      address.host, std::to_string(address.port),
      [&](std::error_code error, const tcp::resolver::results_type& endpoints) {
        if (error) {
          failure = error;
          return;
        }
        asio::async_connect(socket, endpoints, [&](std::error_code error, const tcp::endpoint&) {
          if (error) {
            failure = error;
            return;
          }
          // Written and read at once: a server that answers before it has
          // read everything (a 400 for oversized headers) is heard either way;
          // a failed write shows in the read.
          asio::async_write(socket, asio::buffer(request.data(), request.size()),
                            [&](std::error_code error, size_t) { sent = !error; });
          asio::async_read(socket, asio::dynamic_buffer(reply, kMaxReplyBytes),
                           [&](std::error_code error, size_t) {
                             if (error == asio::error::eof ||
                                 (error == asio::error::connection_reset && !reply.empty()))
                               finished = true;
                             else
                               failure = error ? error : make_error_code(asio::error::message_size);
                           });
        });
      });
  io.run_for(std::chrono::milliseconds(int64_t(timeout_seconds * 1000)));
  if (finished) return reply;
  if (failure)
    throw OpsUnreachable(
        address.toString() + ": " + failure.message() + missingZoneNote(address.toString()), sent);
  throw OpsUnreachable(
      fmt::format("{}: no answer within {:g} s", address.toString(), timeout_seconds), sent);
}

OpsReply requestOps(const HostPort& address, std::string_view method, std::string_view path,
                    double timeout_seconds) {
  const std::string request = fmt::format(
      "{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: trainctl\r\nContent-Length: 0\r\n"
      "Connection: close\r\n\r\n",
      method, path, address.toString());
  const std::string raw = exchangeRaw(address, request, timeout_seconds);
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody"
  const size_t head_end = raw.find("\r\n\r\n");
  int status = 0;
  if (raw.rfind("HTTP/1.", 0) == 0 && raw.size() > 12 && raw[8] == ' ' &&
      head_end != std::string::npos) {
    const auto [end, error] = std::from_chars(raw.data() + 9, raw.data() + 12, status);
    if (error != std::errc() || end != raw.data() + 12) status = 0;
  }
  if (status < 100 || status > 599)
    throw OpsUnreachable(address.toString() + ": the answer is not HTTP");
  return {status, raw.substr(head_end + 4)};
}

}  // namespace traind
