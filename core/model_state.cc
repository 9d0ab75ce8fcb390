#include "core/model_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <unordered_set>

#include "core/error.h"
#include "core/printable.h"
#include "core/safetensors.h"
#include "core/tensorflow_checkpoint.h"

namespace traind {
namespace {

std::string utcNow() {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// What tells `layout`'s variables from those of a checkpoint of another
// architecture (`reader`), the first few: "'hidden2/kernel' is [300, 100]
// there, [300, 120] here; 'hidden3/kernel' is not there". A checkpoint's
// variables are its tensors but the optimizer slots, each named as its
// variable and "/slot". Empty when their names and shapes agree (the
// layers differ in kind or order). Linear in the tensors: a spec may hold
// 250,000 layers.
std::string variableDifferences(const SafetensorsReader& reader, const VariableLayout& layout) {
  constexpr size_t kMostNamed = 3;
  std::vector<std::string> differences;
  std::unordered_set<std::string_view> here;
  for (const VariableView& v : layout.views()) {
    here.insert(v.name);
    if (!reader.contains(v.name))
      differences.push_back(quotedPrintable(v.name) + " is not there");
    else if (reader.shape(v.name) != v.shape)
      differences.push_back(fmt::format("{} is {} there, {} here", quotedPrintable(v.name),
                                        shapeToString(reader.shape(v.name)),
                                        shapeToString(v.shape)));
  }
  for (const std::string& name : reader.names()) {
    const size_t slash = name.rfind('/');
    const bool slot = slash != std::string::npos && reader.contains(name.substr(0, slash));
    if (!slot && !here.contains(name))
      differences.push_back(quotedPrintable(name) + " is there only");
  }
  std::string text;
  for (size_t i = 0; i < std::min(differences.size(), kMostNamed); ++i)
    text += (i == 0 ? "" : "; ") + differences[i];
  if (differences.size() > kMostNamed)
    text += fmt::format("; {} more", differences.size() - kMostNamed);
  return text;
}

}  // namespace

ModelState::ModelState(const ModelSpec& spec, const LayerGraph& graph)
    : spec_(spec),
      graph_(graph),
      layout_(graph.variables),
      parameters_(layout_.totalSize()),
      optimizer_(spec.optimizer, layout_) {}

std::string ModelState::initialize() {
  initializeVariables(graph_, layout_, spec_.seed, parameters_);
  global_step_ = 0;
  std::string said = "initialised the parameters";
  if (spec_.init_from) {
    std::string layers;
    for (const InitFromLayer& layer : spec_.init_from->layers)
      layers += (layers.empty() ? "" : ", ") + layer.name;
    said += "; layers " + layers + " " + initFrom(*spec_.init_from);
  }
  optimizer_.startMovingAverage(parameters_);
  return said;
}

namespace {

// Copies the init_from layers' variables from `reader` (a traind or a
// TensorFlow checkpoint's) into `parameters`, or with null only checks that
// they are there in the layers' shapes. InputError at the spec's
// init_from.layers item when a tensor is missing or of another shape. Returns
// what the checkpoint holds of the layers that they lack ("; not taken:
// 'hidden1/bias' (layer 'hidden1' has no bias: use_bias: false)"), or "".
template <typename Reader>
std::string copyLayers(const Reader& reader, const std::filesystem::path& checkpoint,
                       const InitFromSpec& init_from, const VariableLayout& layout,
                       FlatBuffer* parameters) {
  std::string left;
  for (size_t i = 0; i < init_from.layers.size(); ++i) {
    const InitFromLayer& layer = init_from.layers[i];
    // The list's item is what to change: the layer, its `from`, or the checkpoint.
    const std::string field = "init_from.layers[" + std::to_string(i) + "]";
    bool found = false;
    bool has_bias = false;
    for (const VariableView& v : layout.views()) {
      if (v.name.compare(0, layer.name.size() + 1, layer.name + "/") != 0) continue;
      found = true;
      const std::string key = checkpointVariableKey(
          reader, layer.source, std::string_view(v.name).substr(layer.name.size() + 1));
      if (!reader.contains(key))
        throwInputError(layer.location, field,
                        "checkpoint " + checkpoint.string() + " has no tensor " +
                            quotedPrintable(key) + " (for layer '" + layer.name +
                            "'); `trainctl inspect " + checkpoint.string() +
                            "` lists the tensors it has");
      // The layer as this spec declares it, or the list, is what to change.
      if (reader.shape(key) != v.shape)
        throwInputError(layer.location, field,
                        "layer '" + layer.name +
                            "' does not fit the checkpoint's: " + checkpoint.string() + " holds " +
                            quotedPrintable(key) + " of shape " + shapeToString(reader.shape(key)) +
                            ", this model's '" + v.name + "' is " + shapeToString(v.shape));
      // A damaged tensor (cut short, a value not finite) is said at the
      // spec's line too: the one that named the checkpoint.
      if (parameters) {
        try {
          reader.read(key, v.shape, parameters->view(v));
        } catch (const InputError& e) {
          throwInputError(init_from.checkpoint_location, "init_from.checkpoint", e.what());
        }
      }
      has_bias = has_bias || v.name == layer.name + "/bias";
    }
    if (!found)
      throwInputError(layer.location, field,
                      "layer '" + layer.name + "' has no variables in this model");
    // The source layer's outputs were its kernel's plus a bias that this
    // layer will not add: it starts from another function, which the log says.
    if (const std::string bias = checkpointVariableKey(reader, layer.source, "bias");
        !has_bias && reader.contains(bias))
      left += (left.empty() ? "; not taken: " : ", ") + quotedPrintable(bias) + " (layer '" +
              layer.name + "' has no bias: use_bias: false)";
  }
  return left;
}

// Whether `reader` holds slot `slot` of any variable of `layout`.
bool holdsSlot(const SafetensorsReader& reader, const VariableLayout& layout,
               const std::string& slot) {
  return std::any_of(layout.views().begin(), layout.views().end(),
                     [&](const VariableView& v) { return reader.contains(v.name + "/" + slot); });
}

// "from <checkpoint>" and copyLayers' report, for init_from's checkpoint,
// opened here: InputError at its init_from.checkpoint line when it cannot be
// found or read.
std::string copyInitFromLayers(const InitFromSpec& init_from, const VariableLayout& layout,
                               FlatBuffer* parameters) {
  std::optional<std::filesystem::path> tensorflow_prefix;
  std::optional<TensorflowCheckpointReader> tensorflow;
  std::filesystem::path checkpoint;
  std::optional<SafetensorsReader> tensors;
  try {
    tensorflow_prefix = findTensorflowCheckpoint(init_from.checkpoint);
    if (tensorflow_prefix) {
      tensorflow.emplace(*tensorflow_prefix);
    } else {
      checkpoint = resolveCheckpoint(init_from.checkpoint);
      const CheckpointManifest manifest = readManifest(checkpoint);
      tensors.emplace(checkpoint / manifest.tensors_file);
      checkAgreesWithManifest(checkpoint, manifest, *tensors);
    }
  } catch (const InputError& e) {
    // The spec's line is the one to change.
    throwInputError(init_from.checkpoint_location, "init_from.checkpoint", e.what());
  }
  if (tensorflow)
    return "from " + tensorflow_prefix->string() +
           copyLayers(*tensorflow, *tensorflow_prefix, init_from, layout, parameters);
  return "from " + checkpoint.string() +
         copyLayers(*tensors, checkpoint, init_from, layout, parameters);
}

}  // namespace

std::string ModelState::initFrom(const InitFromSpec& init_from) {
  return copyInitFromLayers(init_from, layout_, &parameters_);
}

void checkInitFromFits(const InitFromSpec& init_from, const LayerGraph& graph) {
  copyInitFromLayers(init_from, VariableLayout(graph.variables), nullptr);
}

void ModelState::restore(const std::filesystem::path& checkpoint,
                         const SourceLocation& dir_given_at) {
  try {
    restoreFrom(checkpoint, Purpose::Resume);
  } catch (const InputError& e) {
    if (dir_given_at.file.empty()) throw;
    throwInputError(dir_given_at, dir_given_at.line > 0 ? "checkpoint.dir" : "", e.what());
  }
}

void ModelState::restoreForExport(const std::filesystem::path& checkpoint) {
  restoreFrom(checkpoint, Purpose::Export);
}

void ModelState::restoreForEvaluation(const std::filesystem::path& checkpoint) {
  restoreFrom(checkpoint, Purpose::Evaluation);
}

namespace {

// An optimizer slot's values, checked (Optimizer::checkReadSlot).
void readSlot(const SafetensorsReader& reader, const std::filesystem::path& file,
              const std::string& name, const Shape& shape, std::span<float> values) {
  reader.read(name, shape, values);
  Optimizer::checkReadSlot(name.substr(name.rfind('/') + 1), values, file.string(), name);
}

}  // namespace

void ModelState::checkRestorable(const ModelSpec& spec, const LayerGraph& graph,
                                 const std::filesystem::path& checkpoint) {
  const CheckpointManifest manifest = readManifest(checkpoint);
  const SafetensorsReader reader(checkpoint / manifest.tensors_file);
  checkCheckpoint(spec, VariableLayout(graph.variables), checkpoint, manifest, reader,
                  Purpose::Resume);
}

void ModelState::checkCheckpoint(const ModelSpec& spec, const VariableLayout& layout,
                                 const std::filesystem::path& checkpoint,
                                 const CheckpointManifest& manifest,
                                 const SafetensorsReader& reader, Purpose purpose) {
  const std::string hash = architectureHash(spec);
  if (manifest.architecture_hash != hash) {
    const std::string differences = variableDifferences(reader, layout);
    throw InputError(
        checkpoint.string() + ": the checkpoint is of another architecture (hash " +
        printable(manifest.architecture_hash) + ", this spec's is " + hash +
        (differences.empty() ? "" : ": " + differences) + ")" +
        (purpose == Purpose::Resume
             ? "; point the checkpoint directory elsewhere, or use init_from to reuse layers"
         : purpose == Purpose::Export ? ": export it with the model spec it was trained with"
                                      : ": evaluate it with the model spec it was trained with"));
  }
  checkAgreesWithManifest(checkpoint, manifest, reader);
  if (purpose != Purpose::Evaluation)
    checkHoldsOptimizerState(spec, layout, checkpoint, reader, purpose);
}

namespace {

// A phrase naming the slots of `reader`'s tensors that are no variable of
// `layout` and no slot of `slots`, each once: "the 'm' and 'v' state", "the
// moving averages" (restoredUnusedState); empty when there are none.
std::string unusedState(const SafetensorsReader& reader, const VariableLayout& layout,
                        const std::vector<std::string>& slots) {
  std::unordered_set<std::string> used;
  for (const VariableView& v : layout.views()) {
    used.insert(v.name);
    for (const std::string& slot : slots) used.insert(v.name + "/" + slot);
  }
  std::vector<std::string> unused;
  bool averages = false;
  for (const std::string& name : reader.names()) {
    if (used.count(name) != 0) continue;
    // The architecture agrees: a tensor more is a slot of a variable.
    const std::string slot = name.substr(name.rfind('/') + 1);
    if (slot == Optimizer::kMovingAverageSlot)
      averages = true;
    else if (std::find(unused.begin(), unused.end(), slot) == unused.end())
      unused.push_back(slot);
  }
  for (std::string& slot : unused) slot = "'" + printable(slot) + "'";
  std::string phrase = unused.empty() ? "" : "the " + listedInProse(unused) + " state";
  if (averages) phrase += phrase.empty() ? "the moving averages" : " and the moving averages";
  return phrase;
}

}  // namespace

void ModelState::restoreFrom(const std::filesystem::path& checkpoint, Purpose purpose) {
  const CheckpointManifest manifest = readManifest(checkpoint);
  SafetensorsReader reader(checkpoint / manifest.tensors_file);
  checkCheckpoint(spec_, layout_, checkpoint, manifest, reader, purpose);
  restored_training_set_ = manifest.training_set;
  // A moving average turned on after this checkpoint starts from it: a
  // checkpoint with none. One that holds some and lacks one is damaged.
  const bool holds_averages = holdsSlot(reader, layout_, Optimizer::kMovingAverageSlot);
  averages_started_from_parameters_ =
      optimizer_.movingAverage() != nullptr && !holds_averages && !layout_.views().empty();
  for (const VariableView& v : layout_.views()) {
    reader.read(v.name, v.shape, parameters_.view(v));
    for (size_t s = 0; s < optimizer_.slotNames().size(); ++s) {
      const bool average = optimizer_.slotNames()[s] == Optimizer::kMovingAverageSlot;
      if (!average && purpose == Purpose::Evaluation) continue;
      const std::string name = v.name + "/" + optimizer_.slotNames()[s];
      if (average && !holds_averages)
        optimizer_.startMovingAverage(parameters_, v);
      else
        readSlot(reader, checkpoint / manifest.tensors_file, name, v.shape,
                 optimizer_.slot(s).view(v));
    }
  }
  restored_unused_state_ =
      purpose == Purpose::Evaluation ? "" : unusedState(reader, layout_, optimizer_.slotNames());
  global_step_ = manifest.global_step;
}

std::optional<std::string> ModelState::unusedStateNote(
    const std::filesystem::path& checkpoint) const {
  if (restored_unused_state_.empty()) return std::nullopt;
  return fmt::format(
      "{}: this spec's update rule ({}) has no use for {} there: left behind, and the "
      "checkpoints from now on hold none of it (the checkpoint was written with another "
      "optimizer, other settings of it, or a moving_average this spec has not)",
      checkpoint.string(), updateRule(spec_), restored_unused_state_);
}

std::optional<std::string> ModelState::startedAveragesNote(const std::filesystem::path& checkpoint,
                                                           const std::string& consequence) const {
  if (!averages_started_from_parameters_) return std::nullopt;
  return fmt::format(
      "{}: the checkpoint holds no moving averages (it was written without this spec's "
      "moving_average): {}",
      checkpoint.string(), consequence);
}

void ModelState::checkHoldsOptimizerState(const ModelSpec& spec, const VariableLayout& layout,
                                          const std::filesystem::path& checkpoint,
                                          const SafetensorsReader& reader, Purpose purpose) {
  const bool exporting = purpose == Purpose::Export;
  if (layout.views().empty()) return;  // nothing to hold state for
  auto holds = [&](const std::string& slot) { return holdsSlot(reader, layout, slot); };
  // Two optimizers name a slot "momentum" (TensorFlow 1's names): RMSProp's
  // holds steps scaled by the learning rate, Momentum's sums of gradients.
  // Its "rms" tells the first apart.
  if (spec.optimizer.kind == OptimizerSpec::Kind::Momentum && holds("rms"))
    throw InputError(checkpoint.string() +
                     ": the checkpoint was written with the rmsprop optimizer (it holds 'rms' "
                     "state), whose 'momentum' state is another quantity than this spec's " +
                     updateRule(spec) + " keeps under that name. " +
                     (exporting
                          ? std::string("Export it with a spec of rmsprop, as it was trained")
                          : std::string("Resuming with another optimizer is not supported: "
                                        "train on with rmsprop, or start a new run in another "
                                        "checkpoint directory from these parameters with "
                                        "init_from")));
  for (const std::string& slot : Optimizer::slotNamesOf(spec.optimizer)) {
    if (slot == Optimizer::kMovingAverageSlot) continue;  // restore() starts it
    if (holds(slot)) continue;  // one missing among others is a damaged checkpoint: read() says
    throw InputError(
        checkpoint.string() + ": the checkpoint holds no '" + slot + "' state of this spec's " +
        updateRule(spec) + ": it was written with another optimizer, or other settings of it. " +
        (exporting ? std::string("Export it with the spec it was trained with (its optimizer "
                                 "and its settings)")
                   : std::string("Resuming so is not supported (its state would start from "
                                 "nothing mid-run): train on with the checkpoint's optimizer, or "
                                 "start a new run in another checkpoint directory from these "
                                 "parameters with init_from")));
  }
}

int64_t ModelState::checkpointBytes() const {
  return layout_.totalSize() * int64_t(1 + optimizer_.slotNames().size()) *
         int64_t(sizeof(float));
}

namespace {

// The tensors of a checkpoint, in its order: each variable, then its
// optimizer slots ("<variable>/<slot>"), the values at `parameters` and
// `slots` (each in the layout's flat order; none given: no values, for a
// header's size).
std::vector<TensorRef> checkpointTensors(const VariableLayout& layout,
                                         const std::vector<std::string>& slot_names,
                                         const float* parameters = nullptr,
                                         const std::vector<const float*>& slots = {}) {
  std::vector<TensorRef> tensors;
  for (const VariableView& v : layout.views()) {
    tensors.push_back({v.name, v.shape, parameters ? parameters + v.offset : nullptr});
    for (size_t s = 0; s < slot_names.size(); ++s)
      tensors.push_back(
          {v.name + "/" + slot_names[s], v.shape, slots.empty() ? nullptr : slots[s] + v.offset});
  }
  return tensors;
}

}  // namespace

void ModelState::checkSavable(const ModelSpec& spec, const LayerGraph& graph,
                              const SourceLocation& dir_location) {
  CheckpointManifest manifest;
  manifest.global_step = kMaxGlobalStep;  // the most digits a step takes
  manifest.model_name = spec.name;
  manifest.architecture_hash = architectureHash(spec);
  try {
    safetensorsHeader(
        checkpointTensors(VariableLayout(graph.variables), Optimizer::slotNamesOf(spec.optimizer)),
        tensorsFileMetadata(manifest));
  } catch (const std::invalid_argument& e) {
    throwInputError(dir_location, dir_location.line > 0 ? "checkpoint.dir" : "",
                    fmt::format("this model's checkpoints could not be read back: {}: train "
                                "without checkpoints, or with fewer or shorter-named layers",
                                e.what()));
  }
}

SavedCheckpoint ModelState::save(const std::filesystem::path& dir, int keep) const {
  std::vector<const float*> slots;
  for (size_t s = 0; s < optimizer_.slotNames().size(); ++s)
    slots.push_back(optimizer_.slot(s).data());
  const std::vector<TensorRef> tensors =
      checkpointTensors(layout_, optimizer_.slotNames(), parameters_.data(), slots);
  // A diverged run's state is no checkpoint: it would become the latest,
  // and every resume would start from it.
  for (const TensorRef& t : tensors) {
    const float* end = t.data + numElements(t.shape);
    if (std::find_if(t.data, end, [](float x) { return !std::isfinite(x); }) != end)
      throw Diverged(fmt::format(
          "step {}: no checkpoint written: '{}' holds a value that is not finite; the run "
          "diverged: lower the learning rate or check the data",
          global_step_, t.name));
  }
  CheckpointManifest manifest;
  manifest.global_step = global_step_;
  manifest.model_name = spec_.name;
  manifest.architecture_hash = architectureHash(spec_);
  manifest.created = utcNow();
  manifest.training_set = training_set_;
  try {
    return saveCheckpoint(dir, manifest, tensors, keep);
  } catch (const std::exception& e) {
    // A full disk, a directory gone or made read-only: said with what is
    // left to resume from.
    std::string latest;
    try {
      const std::optional<std::filesystem::path> found = findLatestCheckpoint(dir);
      latest = found ? "its latest checkpoint is still " + found->filename().string()
                     : "it holds no checkpoint yet";
    } catch (const std::exception&) {
      latest = "its latest checkpoint cannot be read either";
    }
    throw std::runtime_error(fmt::format("step {}: no checkpoint written into {}: {} ({})",
                                         global_step_, dir.string(), e.what(), latest));
  }
}

}  // namespace traind
