#include "daemon/systemd_notify.h"

#include <systemd/sd-daemon.h>

namespace traind {
namespace {

// STATUS= takes one line; a newline would start another assignment.
std::string oneLine(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  return text;
}

void send(const std::string& message) {
  // unset_environment = 0: the node's children (none today) may notify too.
  sd_notify(0, message.c_str());
}

}  // namespace

void notifySystemdReady(const std::string& status) { send("READY=1\nSTATUS=" + oneLine(status)); }

void notifySystemdStatus(const std::string& status) { send("STATUS=" + oneLine(status)); }

void notifySystemdStopping(const std::string& status) {
  send("STOPPING=1\nSTATUS=" + oneLine(status));
}

}  // namespace traind
