#include "devices/pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>

namespace traind {

std::vector<PipelineOp> oneForwardOneBackward(int stage, int stages, int micro_batches) {
  if (stages <= 0 || stage < 0 || stage >= stages || micro_batches <= 0)
    throw std::invalid_argument("pipeline schedule: stage " + std::to_string(stage) + " of " +
                                std::to_string(stages) + ", " + std::to_string(micro_batches) +
                                " micro-batches");
  using Kind = PipelineOp::Kind;
  const int warm_up = std::min(stages - 1 - stage, micro_batches);
  std::vector<PipelineOp> ops;
  for (int m = 0; m < warm_up; ++m) ops.push_back({Kind::Forward, m});
  for (int m = warm_up; m < micro_batches; ++m) {
    ops.push_back({Kind::Forward, m});
    ops.push_back({Kind::Backward, m - warm_up});
  }
  for (int m = micro_batches - warm_up; m < micro_batches; ++m) ops.push_back({Kind::Backward, m});
  return ops;
}

int stageSlots(int stage, int stages, int micro_batches) {
  return std::min(stages - stage, micro_batches);
}

std::string scheduleChart(const std::vector<std::string>& labels, int micro_batches,
                          const std::vector<bool>& backward) {
  const int stages = int(labels.size());
  std::vector<std::vector<PipelineOp>> ops;
  for (int s = 0; s < stages; ++s) {
    ops.push_back(oneForwardOneBackward(s, stages, micro_batches));
    // Only earlier stages skip theirs too, so no stage waits for a skipped pass.
    if (!backward.empty() && !backward[size_t(s)])
      std::erase_if(ops.back(),
                    [](const PipelineOp& op) { return op.kind == PipelineOp::Kind::Backward; });
  }
  // Every pass takes one unit; a pass may start once what it needs has
  // finished in an earlier unit: the forward of the stage before, the
  // backward of the stage after.
  std::vector<std::vector<int>> forward_done(stages, std::vector<int>(micro_batches, -1));
  std::vector<std::vector<int>> backward_done = forward_done;
  std::vector<size_t> next(stages, 0);
  std::vector<std::string> rows(stages);
  const int width = int(std::to_string(micro_batches - 1).size()) + 1;
  size_t label_width = 0;
  for (const std::string& label : labels) label_width = std::max(label_width, label.size());
  for (int s = 0; s < stages; ++s)
    rows[s] = labels[s] + std::string(label_width - labels[s].size(), ' ') + " |";
  for (int t = 0;; ++t) {
    bool left = false;
    for (int s = 0; s < stages; ++s) {
      std::string cell(size_t(width), '.');
      if (next[s] < ops[s].size()) {
        left = true;
        const PipelineOp op = ops[s][next[s]];
        const int m = op.micro_batch;
        const auto doneBefore = [t](int when) { return when >= 0 && when < t; };
        // A forward pass reuses the slot of micro-batch m - slots, which the
        // next stage reads until its backward pass (its forward, when it has
        // none): under 1F1B only a stage without backward passes waits for it.
        const int slots = stageSlots(s, stages, micro_batches);
        const bool slot_free = s == stages - 1 || m < slots ||
                               doneBefore(backward.empty() || backward[size_t(s + 1)]
                                              ? backward_done[s + 1][m - slots]
                                              : forward_done[s + 1][m - slots]);
        const bool ready = op.kind == PipelineOp::Kind::Forward
                               ? (s == 0 || doneBefore(forward_done[s - 1][m])) && slot_free
                               : s == stages - 1 || doneBefore(backward_done[s + 1][m]);
        if (ready) {
          cell.assign(1, op.kind == PipelineOp::Kind::Forward ? 'F' : 'B');
          cell += std::to_string(m);
          cell.resize(size_t(width), ' ');
          (op.kind == PipelineOp::Kind::Forward ? forward_done : backward_done)[s][m] = t;
          ++next[s];
        }
      }
      rows[s] += " " + cell;
    }
    if (!left) break;
  }
  std::string chart;
  for (std::string& row : rows) {
    // The last column is the one where every stage had finished.
    row.resize(row.size() - size_t(width) - 1);
    chart += row + "\n";
  }
  return chart;
}

}  // namespace traind
