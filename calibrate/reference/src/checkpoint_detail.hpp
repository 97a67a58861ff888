#pragma once
// Internals shared by calibrate/reference/src/checkpoint*.cpp: the file names of a Hugging Face checkpoint.

namespace moesim::reference::checkpoint_detail {

/// A sharded checkpoint's index, and the one file of an unsharded checkpoint (save_pretrained's names).
inline constexpr const char* kIndexName = "model.safetensors.index.json";
inline constexpr const char* kSingleName = "model.safetensors";

}  // namespace moesim::reference::checkpoint_detail
