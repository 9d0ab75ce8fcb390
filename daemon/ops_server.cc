#include "daemon/ops_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <asio.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "core/rate_limited_log.h"

namespace traind {
namespace {

using asio::ip::tcp;

// A client has this long to send its request; a finished answer waits this
// long for the client to close before the connection is dropped.
constexpr auto kRequestTimeout = std::chrono::seconds(5);
constexpr auto kLingerTimeout = std::chrono::seconds(1);
constexpr int kMaxConnections = 64;
constexpr std::string_view kHeadMethod = "HEAD ";  // a request line's start

struct Request {
  std::string method;
  std::string path;  // the target without its query
  size_t content_length = 0;
  bool from_web_page = false;  // it carries an Origin: a browser sent it
};

struct Response {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain; charset=utf-8";
  std::string allow;       // the methods a 405 names
  bool head_only = false;  // a HEAD request: the headers of the GET answer
};

const char* reasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 202:
      return "Accepted";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 403:
      return "Forbidden";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 503:
      return "Service Unavailable";
  }
  return "Error";
}

std::string serialize(const Response& r) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reasonPhrase(r.status) +
                    "\r\nContent-Type: " + r.content_type +
                    "\r\nContent-Length: " + std::to_string(r.body.size()) +
                    "\r\nConnection: close\r\nCache-Control: no-store\r\n";
  if (!r.allow.empty()) out += "Allow: " + r.allow + "\r\n";
  out += "\r\n";
  if (!r.head_only) out += r.body;
  return out;
}

Response plain(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body) + "\n";
  return r;
}

// RFC 9110 tchar: the characters of methods and header names.
bool isTokenCharacter(char c) {
  return std::isalnum(uint8_t(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool isToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), isTokenCharacter);
}

bool equalsLowercase(std::string_view s, std::string_view lower) {
  return s.size() == lower.size() &&
         std::equal(s.begin(), s.end(), lower.begin(),
                    [](char a, char b) { return std::tolower(uint8_t(a)) == b; });
}

// A byte no request head holds: a control character other than CR, LF and
// HT (a binary protocol's bytes, as a Cap'n Proto peer's hello sent to this
// port by a worker given it as a ps address).
bool neverInHead(char c) {
  const auto byte = uint8_t(c);
  return (byte < 0x20 && c != '\r' && c != '\n' && c != '\t') || byte == 0x7f;
}

// A request head's lines end in CRLF, or in a bare LF, which RFC 9112 §2.2
// lets a server take as a line's end (printf into nc sends them).
struct HeadEnd {
  // asio's match condition: the end of the empty line that ends the head,
  // or just past a byte no head holds (answered with a 400 at once rather
  // than at the request deadline), or where to look again once more has
  // arrived.
  template <typename Iterator>
  std::pair<Iterator, bool> operator()(Iterator begin, Iterator end) const {
    for (Iterator i = begin; i != end; ++i) {
      if (neverInHead(*i)) return {std::next(i), true};
      if (*i != '\n') continue;
      Iterator next = std::next(i);
      if (next != end && *next == '\r') ++next;
      if (next == end) return {i, false};
      if (*next == '\n') return {std::next(next), true};
    }
    return {end, false};
  }
};

}  // namespace
}  // namespace traind

template <>
struct asio::is_match_condition<traind::HeadEnd> : std::true_type {};

namespace traind {
namespace {

// The line of `head` that starts at `start`, without its CR; `start` moves
// past its LF (npos after the last).
std::string_view nextLine(std::string_view head, size_t& start) {
  const size_t lf = head.find('\n', start);
  std::string_view line = head.substr(start, lf == std::string_view::npos ? lf : lf - start);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  start = lf == std::string_view::npos ? lf : lf + 1;
  return line;
}

// The path of a request target: an origin-form one as it is, an
// absolute-form one ("http://host:port/metrics", as a client sends through
// a proxy, and which RFC 9112 has servers accept) from its authority's end.
// An authority that is empty or holds user information ('@', which RFC 9110
// has recipients refuse) or a fragment leaves the target as it is, which
// no path starts like: a 400. So does https, which this port does not speak.
std::string_view originForm(std::string_view target) {
  constexpr std::string_view scheme = "http://";
  if (target.size() <= scheme.size() ||
      !std::equal(scheme.begin(), scheme.end(), target.begin(),
                  [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); }))
    return target;
  const std::string_view rest = target.substr(scheme.size());
  const std::string_view authority = rest.substr(0, rest.find_first_of("/?"));
  if (authority.empty() || authority.find_first_of("@#") != std::string_view::npos) return target;
  return authority.size() < rest.size() && rest[authority.size()] == '/'
             ? rest.substr(authority.size())
             : std::string_view("/");
}

// Parses a request head (request line, header lines, the empty line) into
// `out`; returns what is wrong with it instead, for the 400's body.
std::optional<std::string> parseHead(std::string_view head, Request& out) {
  // Without the empty line that ends it (HeadEnd found it).
  head.remove_suffix(head.ends_with("\r\n") ? 2 : 1);
  size_t next = 0;
  const std::string_view line = nextLine(head, next);
  const size_t first = line.find(' ');
  const size_t second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  if (second == std::string_view::npos) return "expected a request line 'METHOD /path HTTP/1.1'";
  const std::string_view method = line.substr(0, first);
  const std::string_view raw_target = line.substr(first + 1, second - first - 1);
  const std::string_view target = originForm(raw_target);
  const std::string_view version = line.substr(second + 1);
  if (!isToken(method)) return "the method is not a token";
  if (target.empty() || target[0] != '/' ||
      !std::all_of(raw_target.begin(), raw_target.end(),
                   [](char c) { return c > 0x20 && c < 0x7f; }))
    return "expected a target path starting with '/'";
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return "expected HTTP/1.0 or HTTP/1.1";
  out.method = std::string(method);
  out.path = std::string(target.substr(0, target.find('?')));

  std::optional<size_t> content_length;
  while (next != std::string_view::npos && next < head.size()) {
    const std::string_view header = nextLine(head, next);
    if (header.empty() || header[0] == ' ' || header[0] == '\t')
      return "a header line is empty or folded";
    const size_t colon = header.find(':');
    if (colon == std::string_view::npos || !isToken(header.substr(0, colon)))
      return "expected header lines 'Name: value'";
    std::string_view value = header.substr(colon + 1);
    if (std::any_of(value.begin(), value.end(),
                    [](char c) { return (uint8_t(c) < 0x20 && c != '\t') || c == 0x7f; }))
      return "a header value holds a control character";
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    const std::string_view name = header.substr(0, colon);
    if (equalsLowercase(name, "origin")) out.from_web_page = true;
    if (equalsLowercase(name, "transfer-encoding"))
      return "request bodies must have a Content-Length";
    if (equalsLowercase(name, "content-length")) {
      size_t length = 0;
      const auto [ptr, error] = std::from_chars(value.data(), value.data() + value.size(), length);
      if (value.empty() || error != std::errc() || ptr != value.data() + value.size())
        return "Content-Length is not a number";
      if (content_length && *content_length != length) return "two different Content-Lengths";
      content_length = length;
    }
  }
  out.content_length = content_length.value_or(0);
  return std::nullopt;
}

class Connection;

// What the server knows besides sockets: the endpoints, and the connections
// that are open. Touched on the server's thread only.
struct Endpoints {
  Response route(const Request& request, const std::string& peer);

  NodeMetrics& metrics;
  OpsControls controls;
  int open_connections = 0;
  // Connections in the order they came, some closed since (dropped as they
  // reach the front, or all at once past 2 x kMaxConnections entries): when
  // every slot is taken, the oldest that is not writing its answer (still
  // sending its request, or lingering after the answer) makes room for a
  // new client, so that slow clients holding every slot cannot keep a health
  // probe out.
  std::deque<std::weak_ptr<Connection>> arrivals;
};

// One client: read the head (and a small body, discarded), answer, close.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, Endpoints& endpoints)
      : socket_(std::move(socket)),
        deadline_(socket_.get_executor()),
        head_(OpsServer::kMaxHeaderBytes),
        endpoints_(endpoints) {
    ++endpoints_.open_connections;
  }
  ~Connection() { --endpoints_.open_connections; }

  void start() {
    auto& arrivals = endpoints_.arrivals;
    while (!arrivals.empty() && !evictable(arrivals.front().lock())) arrivals.pop_front();
    if (arrivals.size() > 2 * size_t(kMaxConnections))
      std::erase_if(arrivals,
                    [](const std::weak_ptr<Connection>& c) { return !evictable(c.lock()); });
    arrivals.push_back(weak_from_this());
    armDeadline(kRequestTimeout);
    asio::async_read_until(socket_, head_, HeadEnd{},
                           [self = shared_from_this()](std::error_code error, size_t bytes) {
                             self->onHead(error, bytes);
                           });
  }

  // Closes the oldest connection not writing its answer; false if there is none.
  static bool evictOldest(Endpoints& endpoints) {
    auto& arrivals = endpoints.arrivals;
    while (!arrivals.empty()) {
      const std::shared_ptr<Connection> oldest = arrivals.front().lock();
      arrivals.pop_front();
      if (evictable(oldest)) {
        oldest->close();
        return true;
      }
    }
    return false;
  }

 private:
  static bool evictable(const std::shared_ptr<Connection>& c) {
    return c && c->socket_.is_open() && !c->answering_;
  }

  // Closing the socket ends whatever read or write is in flight.
  void armDeadline(std::chrono::seconds timeout) {
    deadline_.expires_after(timeout);
    deadline_.async_wait([self = shared_from_this()](std::error_code error) {
      if (!error) self->close();
    });
  }

  void close() {
    std::error_code ignored;
    deadline_.cancel();
    socket_.close(ignored);
  }

  void onHead(std::error_code error, size_t bytes) {
    if (error == asio::error::not_found) {  // the buffer filled up before the empty line
      head_request_ = startsWithHead(head_);
      respond(plain(400, "request headers over " +
                             std::to_string(OpsServer::kMaxHeaderBytes / 1024) + " KiB"));
      return;
    }
    if (error) {  // the client went away, or the deadline closed the socket
      close();
      return;
    }
    const std::string head(asio::buffers_begin(head_.data()),
                           asio::buffers_begin(head_.data()) + std::ptrdiff_t(bytes));
    head_.consume(bytes);
    head_request_ = head.starts_with(kHeadMethod);
    if (neverInHead(head.back())) {
      respond(plain(400, "the request holds a control character: not HTTP"));
      return;
    }
    if (std::optional<std::string> problem = parseHead(head, request_)) {
      respond(plain(400, *problem));
      return;
    }
    if (request_.content_length > OpsServer::kMaxBodyBytes) {
      respond(plain(
          400, "request body over " + std::to_string(OpsServer::kMaxBodyBytes / 1024) + " KiB"));
      return;
    }
    // No endpoint reads a body, but it must be off the wire before the answer.
    const size_t buffered = std::min(head_.size(), request_.content_length);
    head_.consume(buffered);
    body_.resize(request_.content_length - buffered);
    asio::async_read(socket_, asio::buffer(body_),
                     [self = shared_from_this()](std::error_code error, size_t) {
                       if (error) {
                         self->close();
                         return;
                       }
                       self->respond(self->endpoints_.route(self->request_, self->peer()));
                     });
  }

  // Whether what `head` holds starts as a HEAD request.
  static bool startsWithHead(const asio::streambuf& head) {
    const auto data = head.data();
    return head.size() >= kHeadMethod.size() &&
           std::equal(kHeadMethod.begin(), kHeadMethod.end(), asio::buffers_begin(data));
  }

  std::string peer() const {
    std::error_code error;
    const tcp::endpoint endpoint = socket_.remote_endpoint(error);
    if (error) return "an unknown peer";
    return hostPortOf(*endpoint.data()).toString();  // "[::1]:53170", as the ps names its peers
  }

  void respond(Response response) {
    answering_ = true;
    // No answer to a HEAD has a body (RFC 9110 §9.3.2), an error's neither.
    response.head_only = head_request_;
    response_ = serialize(response);
    asio::async_write(socket_, asio::buffer(response_),
                      [self = shared_from_this()](std::error_code error, size_t) {
                        if (error)
                          self->close();
                        else
                          self->linger();
                      });
  }

  // Half-closes and reads whatever the client still sends until it closes:
  // closing with unread input would reset the connection and could destroy
  // the answer before the client reads it (a 400 for oversized headers).
  void linger() {
    answering_ = false;
    std::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    armDeadline(kLingerTimeout);
    drain();
  }

  void drain() {
    body_.resize(4096);
    socket_.async_read_some(asio::buffer(body_),
                            [self = shared_from_this()](std::error_code error, size_t) {
                              if (error)
                                self->close();
                              else
                                self->drain();
                            });
  }

  tcp::socket socket_;
  asio::steady_timer deadline_;
  bool answering_ = false;  // its answer is being written
  // The request line starts with "HEAD " (a request refused before its
  // method was read out too).
  bool head_request_ = false;
  asio::streambuf head_;
  std::vector<char> body_;
  Request request_;
  std::string response_;
  Endpoints& endpoints_;
};

}  // namespace

struct OpsServer::Impl {
  Impl(NodeMetrics& metrics, OpsControls controls) : endpoints{metrics, controls, 0, {}} {}

  void accept();
  void run();

  // Declared before io: connections still open when io is destroyed count
  // themselves out of it in their destructors.
  Endpoints endpoints;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  RateLimitedLog accept_failures{std::chrono::seconds(10)};
  std::thread thread;
};

void OpsServer::Impl::accept() {
  acceptor.async_accept([this](std::error_code error, tcp::socket socket) {
    if (error == asio::error::operation_aborted) return;
    if (error) {
      // Out of file descriptors, say: try again shortly instead of spinning.
      accept_failures.log([&](size_t times) {
        spdlog::warn("the ops server could not accept a connection: {}{}", error.message(),
                     RateLimitedLog::since(times));
      });
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](std::error_code e) {
        if (!e) accept();
      });
      return;
    }
    if (endpoints.open_connections >= kMaxConnections && !Connection::evictOldest(endpoints)) {
      std::error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<Connection>(std::move(socket), endpoints)->start();
    }
    accept();
  });
}

void OpsServer::Impl::run() {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      // A handler failed (out of memory, say): log it and serve on.
      spdlog::error("the ops server: {}", e.what());
    }
  }
}

Response Endpoints::route(const Request& request, const std::string& peer) {
  const std::string& path = request.path;
  const bool get = request.method == "GET" || request.method == "HEAD";
  const bool post = request.method == "POST";
  Response r;
  if (path == "/healthz" || path == "/metrics" || path == "/status") {
    if (!get) {
      r = plain(405, request.method + " " + path + ": use GET");
      r.allow = "GET, HEAD";
      return r;
    }
    if (path == "/healthz") {
      const NodeMetrics::Health health = metrics.health();
      r = plain(health.ok ? 200 : 503, health.reason);
    } else if (path == "/metrics") {
      r.body = metrics.prometheusText();
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    } else {
      r.body = metrics.statusJson();
      r.content_type = "application/json";
    }
    return r;
  }
  if (path == "/stop" || path == "/checkpoint") {
    if (!post) {
      r = plain(405, request.method + " " + path + ": use POST");
      r.allow = "POST";
      return r;
    }
    // A browser sends a web page's POST anywhere it is told, with the page's
    // Origin, and a loopback or private address is no guard against a page
    // open on a host that reaches the node: the controls are trainctl's and
    // curl's, which send none.
    if (request.from_web_page)
      return plain(403, "POST " + path +
                            " from a web page (the request has an Origin) is refused: use "
                            "trainctl or curl");
    if (path == "/stop") {
      controls.stop->request("POST /stop from " + peer);
      return plain(202, "stopping: a clean stop, as on SIGTERM");
    }
    if (!controls.checkpoint)
      return plain(404, "this node writes no checkpoints: the chief (worker 0) does");
    if (!metrics.writesCheckpoints())
      return plain(409, "no checkpoint dir is configured (checkpoint.dir or --checkpoint-dir)");
    spdlog::info("checkpoint requested over HTTP by {}", peer);
    controls.checkpoint->store(true);
    return plain(202, "a checkpoint will be written at the next step boundary");
  }
  return plain(404, "no such endpoint: " + path + " (try /healthz, /metrics, /status)");
}

OpsServer::OpsServer(const HostPort& address, NodeMetrics& metrics, OpsControls controls)
    : impl_(std::make_unique<Impl>(metrics, controls)) {
  const std::string where = "the ops server's address " + address.toString();
  std::error_code error;
  tcp::resolver resolver(impl_->io);
  const tcp::resolver::results_type endpoints =
      resolver.resolve(address.host, std::to_string(address.port),
                       tcp::resolver::passive | tcp::resolver::numeric_service, error);
  if (error || endpoints.empty())
    throw InputError(where + " does not resolve: " + error.message() +
                     missingZoneNote(address.toString()));
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  if (endpoints.size() > 1)
    spdlog::warn(
        "{} resolves to {} addresses; it is served on the first only, {} (a client "
        "tries each in turn)",
        where, endpoints.size(), hostPortOf(*endpoint.data()).toString());
  tcp::acceptor& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error)
    throw InputError(where + " cannot be bound" +
                     (error == asio::error::address_in_use ? " (is the port in use?)"
                      : error.value() == EADDRNOTAVAIL     ? " (is the address one of this host's?)"
                                                           : "") +
                     ": " + error.message());
  impl_->accept();
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  // As the spec names it, and what that resolved to where it differs (as
  // the ps's listening line does).
  HostPort named = address, bound = hostPortOf(*endpoint.data());
  named.port = bound.port = port();
  spdlog::info("ops server on http://{}/ (healthz, metrics, status{})", named.toString(),
               named.host == bound.host ? "" : "; listening on " + bound.toString());
}

OpsServer::~OpsServer() {
  impl_->io.stop();
  impl_->thread.join();
}

uint16_t OpsServer::port() const {
  std::error_code error;
  return impl_->acceptor.local_endpoint(error).port();
}

}  // namespace traind
