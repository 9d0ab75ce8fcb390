#include "rpc/deadline.h"

namespace traind {

kj::TimePoint deadlineIn(kj::Duration delay) {
  return kj::systemPreciseMonotonicClock().now() + delay;
}

}  // namespace traind
