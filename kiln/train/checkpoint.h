#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kiln/core/tensor.h"
#include "kiln/io/dir_transaction.h"
#include "kiln/nn/module.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"

namespace kiln::train {

// Note [checkpoint layout]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A checkpoint is a directory DIR holding exactly three files:
//   model.safetensors      Module::state_dict() (parameters and persistent buffers) under the
//                          module's dotted names, so PyTorch's safetensors can read it too
//   optimizer.safetensors  the optimizer's state tensors, "state.<group>.<param>.<name>"
//   checkpoint.json        {"format": "kiln.checkpoint", "version": 1, "epoch", "step",
//                          "optimizer": the optimizer's state meta (type, hyperparameters per
//                          group, step counts, shapes), "scheduler": LRScheduler::state_dict()
//                          or null, "rng": the default generator's {"seed", "offset"},
//                          "metadata": the caller's JSON, "files": {name: {"bytes", "crc32"}}
//                          for both tensor files, "crc32": checksum of the rest of the JSON}
// Everything is data; loading runs no code. Every file is verified (size, CRC-32, the strict
// safetensors reader) before any of the model, optimizer, scheduler or generator changes, so a
// corrupt, truncated or mismatched set is a kiln::Error naming the file and the model is left
// as it was. checkpoint.json is a verified manifest (Note [verified manifest] in
// kiln/io/manifest.h), so hand-editing it breaks its checksum on purpose.
//
// Note [checkpoint atomicity]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The three files must change together: save writes them in a directory transaction (Note
// [directory transaction] in kiln/io/dir_transaction.h), so whenever DIR exists it is complete,
// a crash between the transaction's two renames leaves a complete DIR.old that every reader
// here falls back to, and a failed or killed save never costs the previous checkpoint. One
// process at a time may save to a given DIR. save refuses to replace a DIR holding anything
// other than checkpoint files, so pointing it at a wrong directory cannot delete user data.

// What a checkpoint records besides tensors. `epoch` counts the completed epochs (resume runs
// epochs epoch, epoch + 1, ... and sets the loader's epoch to `epoch`); `step` counts the
// optimizer steps taken; `metadata` is any JSON the caller wants back (model name and
// configuration, command-line arguments, history so far). JSON has no NaN or infinity: such
// numbers in metadata come back as null.
struct CheckpointState {
  int64_t epoch = 0;
  int64_t step = 0;
  nlohmann::json metadata = nlohmann::json::object();
};

// The format version this build writes and reads.
inline constexpr int64_t kCheckpointFormatVersion = 1;

// Writes a checkpoint of model, optimizer, scheduler (may be null), the default generator's
// state and `state` into `dir`, atomically as a set (see Note [checkpoint atomicity]); missing
// parent directories are created. On any error the previous checkpoint at `dir`, if any, is
// left as it was.
void save_checkpoint(const std::string& dir, const nn::Module& model,
                     const optim::Optimizer& optimizer, const optim::LRScheduler* scheduler,
                     const CheckpointState& state, const Loc& loc = Loc::current());

// Restores model (strict: the same keys, shapes and dtypes), optimizer (the same type, groups
// and parameter shapes), scheduler (when non-null; the checkpoint must then hold a scheduler of
// the same type) and the default generator, and returns the recorded epoch, step and metadata.
// A scheduler saved in the checkpoint may be left out (null) at load. All or nothing: on error
// nothing has changed.
CheckpointState load_checkpoint(const std::string& dir, nn::Module& model,
                                optim::Optimizer& optimizer, optim::LRScheduler* scheduler,
                                const Loc& loc = Loc::current());

// Epoch, step and metadata from checkpoint.json alone (verified, but the tensor files are not
// read): what a tool needs to rebuild the model before loading weights into it.
CheckpointState read_checkpoint_state(const std::string& dir, const Loc& loc = Loc::current());
// read_checkpoint_state(dir).metadata.
nlohmann::json read_checkpoint_metadata(const std::string& dir, const Loc& loc = Loc::current());

// Whether `dir` holds a checkpoint that the functions here would read: DIR/checkpoint.json, or,
// when DIR is absent, the DIR.old an interrupted save left (test this, not that DIR exists, to
// decide whether to resume). Never throws.
bool checkpoint_exists(const std::string& dir);

// Loads only the model's weights (strict), for inference; optimizer, scheduler and generator
// are untouched and optimizer.safetensors is not read.
void load_checkpoint_weights(const std::string& dir, nn::Module& model,
                             const Loc& loc = Loc::current());

// Fault injection for tests: called before each step of save_checkpoint's directory protocol
// with the step's name ("mkdir", "rename_old", "rename_new", "remove_old") and the path it acts
// on; a nonzero return makes the step fail as if the system call had set errno to that value.
// (File writes inside the temporary directory go through kiln/io/atomic_file.h, whose own hook
// covers them.) Process-wide; pass an empty function to remove it. The same hook as
// io::set_dir_transaction_fault_hook, which this sets: it sees every directory transaction.
using CheckpointFaultHook = io::DirTransactionFaultHook;
void set_checkpoint_fault_hook(CheckpointFaultHook hook);

}  // namespace kiln::train
