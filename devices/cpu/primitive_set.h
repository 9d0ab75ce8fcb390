// Every oneDNN primitive of one replica, each with its arguments bound once,
// and the scratchpad they share. Built before the first step; a step only
// runs calls, so it creates and allocates nothing.
#pragma once

#include <cstddef>
#include <deque>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

namespace traind {

using PrimitiveArguments = std::unordered_map<int, dnnl::memory>;

// A primitive and the memory objects it reads and writes. Memory objects are
// shared handles: re-pointing one (BoundMemory) re-points the call.
class PrimitiveCall {
 public:
  PrimitiveCall(dnnl::primitive primitive, PrimitiveArguments arguments)
      : primitive_(std::move(primitive)), arguments_(std::move(arguments)) {}

  void run(dnnl::stream& stream) const { primitive_.execute(stream, arguments_); }

 private:
  friend class PrimitiveSet;
  dnnl::primitive primitive_;
  PrimitiveArguments arguments_;
};

class PrimitiveSet {
 public:
  explicit PrimitiveSet(dnnl::engine engine) : engine_(std::move(engine)) {}
  PrimitiveSet(const PrimitiveSet&) = delete;
  PrimitiveSet& operator=(const PrimitiveSet&) = delete;

  const dnnl::engine& engine() const { return engine_; }

  // The attributes every primitive of the set is described with: a
  // user-provided scratchpad (the library's own is per thread and may be
  // reallocated during a step), and the given post-ops.
  static dnnl::primitive_attr attributes(const dnnl::post_ops& post_ops = dnnl::post_ops());

  // Creates the primitive of `pd` (made with attributes()) and binds its
  // arguments. The reference stays valid as long as the set.
  template <class Primitive>
  const PrimitiveCall& add(const typename Primitive::primitive_desc& pd,
                           PrimitiveArguments arguments) {
    return add(Primitive(pd), pd.scratchpad_desc(), std::move(arguments));
  }

  // A reorder that copies `from` into `to` in `to`'s layout.
  const PrimitiveCall& addReorder(const dnnl::memory& from, const dnnl::memory& to);

  // Called once after the last add: allocates one scratchpad as large as the
  // largest need and hands it to every call that has one (calls run one at a
  // time, so they can share it).
  void allocateScratchpad();

 private:
  const PrimitiveCall& add(dnnl::primitive primitive, const dnnl::memory::desc& scratchpad,
                           PrimitiveArguments arguments);

  dnnl::engine engine_;
  std::deque<PrimitiveCall> calls_;  // a deque: references stay valid as it grows
  size_t scratchpad_bytes_ = 0;
  dnnl::memory scratchpad_;
};

}  // namespace traind
